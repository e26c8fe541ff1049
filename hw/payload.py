"""Packing numpy arrays into the gateware's stream payloads, and back.

The bit layout of every payload is defined once, by the Amaranth layouts in ``hw/``; these helpers
use those layouts (``layout.const(...)``) instead of re-stating the bit positions, so the
testbenches, the board host script and the gateware cannot disagree about them.
"""

import numpy as np
from amaranth.hdl import Const, signed
from amaranth.lib import data

from hw.requant import load_layout
from hw.systolic_array import weight_layout
from sw import quant
from sw.config import TileConfig

__all__ = ["pack", "pack_int8", "unpack_int8", "weight_words", "rq_words"]


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


def weight_words(w: np.ndarray, cfg: TileConfig) -> list[int]:
    """Weight-load beats for ``w[K, N]``: word ``nt * k_tiles + kt`` of PE (r, c) is
    ``w[kt*rows + r, nt*cols + c]``."""
    w = np.asarray(w)
    if w.shape != (cfg.k_dim, cfg.n_dim):
        raise ValueError(f"weights of shape {w.shape} do not fit the tile ({cfg.k_dim}, {cfg.n_dim})")
    layout = weight_layout(cfg)
    words = []
    for nt in range(cfg.n_tiles):
        for kt in range(cfg.k_tiles):
            block = w[kt * cfg.rows:(kt + 1) * cfg.rows, nt * cfg.cols:(nt + 1) * cfg.cols]
            words.append(pack(layout, {"addr": nt * cfg.k_tiles + kt,
                                       "data": [int(v) for v in block.reshape(-1)]}))
    return words


def rq_words(mult: np.ndarray, shift: np.ndarray, cfg: TileConfig) -> list[int]:
    """Requantisation-parameter beats, one per output slice of ``cols`` channels."""
    mult, shift = np.asarray(mult).astype(np.int64), np.asarray(shift).astype(np.int64)
    if mult.min(initial=0) < 0 or mult.max(initial=0) > quant.MULT_MAX:
        raise ValueError(f"requantisation multipliers must lie in [0, {quant.MULT_MAX}]")
    if shift.min(initial=0) < 0 or shift.max(initial=0) > quant.SHIFT_MAX:
        raise ValueError(f"requantisation shifts must lie in [0, {quant.SHIFT_MAX}]")
    layout = load_layout(cfg.cols, cfg.n_tiles)
    words = []
    for nt in range(cfg.n_tiles):
        sl = slice(nt * cfg.cols, (nt + 1) * cfg.cols)
        words.append(pack(layout, {"addr": nt, "p": {"mult": [int(v) for v in mult[sl]],
                                                      "shift": [int(v) for v in shift[sl]]}}))
    return words
