"""Golden traces, what the RTL is checked against: the shared format (``format``), trace directories
(``store``; ``python -m sw.trace DIR`` validates one), decode, full-step and corner-case traces, and
their export (``export``; ``python sw/export_trace.py``)."""
