"""The full-step trace's modes: the export flags of each (``python sw/export_trace.py --full-step``).

Dense is FastCar with a threshold no TAS reaches (the same decisions made, none replays); sparse
attention is 5 sinks and a 65-token window, which reaches the position one frame (64 tokens)
earlier. ``noxfile.py`` reads this file for ``nox -s step -- --mode M``.
"""

STEP_MODES = {
    "fastcar": [],
    "dense": ["--tau", "inf"],
    "sparse": ["--tau", "inf", "--sparse-window", "65", "--sinks", "5"],
    "fastcar+sparse": ["--sparse-window", "65", "--sinks", "5"],
}
