"""The full-step trace's modes: the export flags of each (``python sw/export_trace.py --full-step``).

Dense is the best dense design (:data:`sw.operating_point.DENSE`): FastCar with a threshold no TAS
reaches (the same decisions made, none replays); FastCar is the MLP engine's threshold
(``sw.model.fastcar.DEFAULT_TAU``); sparse attention is 5 sinks and a 65-token window, which reaches
the position one frame (64 tokens) earlier. These four decode the shipped model
(``sw/checkpoints/default``). ``default`` is the default operating point,
:data:`sw.operating_point.DEFAULT`: its checkpoint, threshold and sparse attention, and the mode
``nox -s step`` checks unless given another. ``noxfile.py`` reads this file for
``nox -s step -- --mode M``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # run by path from noxfile.py

from sw.operating_point import DEFAULT  # noqa: E402

_SHIPPED = ["--point", "dense"]
_FASTCAR = ["--tau", "-4"]
_SPARSE = ["--sparse-window", "65", "--sinks", "5"]

STEP_MODES = {
    "fastcar": _SHIPPED + _FASTCAR,
    "dense": _SHIPPED,
    "sparse": _SHIPPED + _SPARSE,
    "fastcar+sparse": _SHIPPED + _FASTCAR + _SPARSE,
    "default": ["--point", "default", *DEFAULT.export_flags()],
}
