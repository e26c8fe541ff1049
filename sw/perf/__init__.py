"""Performance models: cycle models of the built accelerators (``cycles``, ``cycles_v2``), the v2
design study (``study_v2``), the projection to 7B sizes and energy (``projection``) and the system
model of the whole decode step on the board (``system_model``)."""
