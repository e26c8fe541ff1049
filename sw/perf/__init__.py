"""Performance models: the cycle model of the built accelerator (``cycles``), the projection to 7B
sizes and energy (``projection``) and the system model of the whole decode step on the board
(``system_model``)."""
