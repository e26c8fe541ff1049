"""The integer golden model: the quantisation spec (``quant``, written once), the stored integer
constants (``int8``, ``integer_path``), their calibration (``calibrate``; ``python -m sw.golden``),
and the whole decode step in integers (``step``)."""
