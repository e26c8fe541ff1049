"""Packing numpy arrays into the gateware's stream payloads, and back.

The bit layout of every payload is defined once, by the Amaranth layouts in ``hw/``; these helpers
use those layouts (``layout.const(...)``) instead of re-stating the bit positions, so the
testbenches, the board host script and the gateware cannot disagree about them.
"""

import numpy as np
from amaranth.hdl import Const, signed
from amaranth.lib import data

__all__ = ["pack", "pack_int8", "unpack_int8"]


def pack(layout, value) -> int:
    """Bits of ``layout.const(value)`` as a non-negative int."""
    return Const.cast(layout.const(value)).value & ((1 << layout.size) - 1)


def pack_int8(vec) -> int:
    """int8 vector -> payload of ``ArrayLayout(signed(8), len(vec))`` (element 0 in the LSBs)."""
    vec = np.asarray(vec)
    return pack(data.ArrayLayout(signed(8), len(vec)), [int(v) for v in vec])


def unpack_int8(bits: int, n: int) -> np.ndarray:
    """Payload of ``ArrayLayout(signed(8), n)`` -> int8 vector."""
    return np.frombuffer(int(bits).to_bytes(n, "little"), dtype=np.int8).copy()
