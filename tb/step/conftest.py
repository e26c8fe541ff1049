"""The step testbenches use the software tests' small checkpoint (``tests/conftest.py``)."""

from tests.conftest import tiny_ckpt  # noqa: F401  (a fixture, registered by import)
