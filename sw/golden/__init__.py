"""The integer golden model, on the quantisation spec written once in :mod:`sw.spec.quant`: the stored integer
constants (``int8``, ``integer_path``), their calibration (``calibrate``; ``python -m sw.golden``),
and the whole decode step in integers (``step``)."""
