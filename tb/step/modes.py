"""The full-step trace's modes: the export flags of each (``python sw/export_trace.py --full-step``).

Dense is FastCar with a threshold no TAS reaches (the same decisions made, none replays); sparse
attention is 5 sinks and a 65-token window, which reaches the position one frame (64 tokens)
earlier. These four decode the shipped model (``sw/checkpoints/default``). ``default`` is the
default operating point, :data:`sw.operating_point.DEFAULT`: its checkpoint, threshold and sparse
attention. ``noxfile.py`` reads this file for ``nox -s step -- --mode M``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # run by path from noxfile.py

from sw.operating_point import DEFAULT  # noqa: E402

STEP_MODES = {
    "fastcar": [],
    "dense": ["--tau", "inf"],
    "sparse": ["--tau", "inf", "--sparse-window", "65", "--sinks", "5"],
    "fastcar+sparse": ["--sparse-window", "65", "--sinks", "5"],
    "default": DEFAULT.export_flags(),
}
