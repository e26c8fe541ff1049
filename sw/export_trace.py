"""``python sw/export_trace.py``: the trace export command (:mod:`sw.trace.export`), kept at this path."""

import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, sys.path[0] is sw/, where the package sw/trace would hide the standard
    # library's module of that name: import from the repository instead.
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    from sw.trace.export import main

    sys.exit(main())
