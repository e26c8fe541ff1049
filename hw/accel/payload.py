"""Packing numpy arrays into the gateware's stream payloads, and back.

The bit layout of every payload is defined once, by the Amaranth layouts in ``hw/``; these helpers
use those layouts (``layout.const(...)``) instead of re-stating the bit positions, so the
testbenches, the board host script and the gateware cannot disagree about them.
"""

import numpy as np
from amaranth.hdl import Const, signed
from amaranth.lib import data

from hw.accel.requant import load_layout
from hw.accel.systolic_array import weight_layout
from sw.config import TileConfig
from sw.golden import quant

__all__ = ["pack", "pack_int8", "unpack_int8", "weight_words", "rq_words", "mlp_loads"]


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


def weight_words(w: np.ndarray, cfg: TileConfig, *, bank: int = 0, banks: int = 1) -> list[int]:
    """Weight-load beats for ``w[K, N]`` into ``bank``: word ``(bank * n_tiles + nt) * k_tiles + kt``
    of PE (r, c) is ``w[kt*rows + r, nt*cols + c]``."""
    w = np.asarray(w)
    if w.shape != (cfg.k_dim, cfg.n_dim):
        raise ValueError(f"weights of shape {w.shape} do not fit the tile ({cfg.k_dim}, {cfg.n_dim})")
    layout = weight_layout(cfg, banks)
    words = []
    for nt in range(cfg.n_tiles):
        for kt in range(cfg.k_tiles):
            block = w[kt * cfg.rows:(kt + 1) * cfg.rows, nt * cfg.cols:(nt + 1) * cfg.cols]
            words.append(pack(layout, {"addr": (bank * cfg.n_tiles + nt) * cfg.k_tiles + kt,
                                       "data": [int(v) for v in block.reshape(-1)]}))
    return words


def rq_words(mult: np.ndarray, shift: np.ndarray, cfg: TileConfig, *, bank: int = 0,
             banks: int = 1) -> list[int]:
    """Requantisation-parameter beats, one per output slice of ``cols`` channels."""
    mult, shift = np.asarray(mult).astype(np.int64), np.asarray(shift).astype(np.int64)
    if mult.min(initial=0) < 0 or mult.max(initial=0) > quant.MULT_MAX:
        raise ValueError(f"requantisation multipliers must lie in [0, {quant.MULT_MAX}]")
    if shift.min(initial=0) < 0 or shift.max(initial=0) > quant.SHIFT_MAX:
        raise ValueError(f"requantisation shifts must lie in [0, {quant.SHIFT_MAX}]")
    layout = load_layout(cfg.cols, banks * cfg.n_tiles)
    words = []
    for nt in range(cfg.n_tiles):
        sl = slice(nt * cfg.cols, (nt + 1) * cfg.cols)
        words.append(pack(layout, {"addr": bank * cfg.n_tiles + nt, "p": {"mult": [int(v) for v in mult[sl]],
                                                      "shift": [int(v) for v in shift[sl]]}}))
    return words


def mlp_loads(layers: list[dict], chunks: int, t_in: TileConfig, t_dn: TileConfig) -> dict:
    """Load words of the MLP cores for every layer, by port name.

    ``layers[l]`` holds ``wg, wu`` ``[d, d_ff]``, ``wd`` ``[d_ff, d]`` and the integer constants
    of :func:`sw.golden.quant.swiglu_int8`. Hidden chunk ``j`` of layer ``l`` is weight bank
    ``l * chunks + j``. Returns ``wg, wu, wd, rqg, rqu, rqd, lut`` word lists (``rqd`` for the
    reducer, one entry per output slice and layer) and ``h``: ``(mult, shift)`` per layer.
    """
    from hw.accel.swiglu_gate import lut_load_layout

    banks = len(layers) * chunks
    f = t_in.n_dim
    out = {k: [] for k in ("wg", "wu", "wd", "rqg", "rqu", "rqd", "lut")}
    out["h"] = []
    for n, lay in enumerate(layers):
        for j in range(chunks):
            sl = slice(j * f, (j + 1) * f)
            b = n * chunks + j
            out["wg"] += weight_words(np.asarray(lay["wg"])[:, sl], t_in, bank=b, banks=banks)
            out["wu"] += weight_words(np.asarray(lay["wu"])[:, sl], t_in, bank=b, banks=banks)
            out["wd"] += weight_words(np.asarray(lay["wd"])[sl, :], t_dn, bank=b, banks=banks)
            out["rqg"] += rq_words(np.asarray(lay["mult_g"])[sl], np.asarray(lay["shift_g"])[sl],
                                   t_in, bank=b, banks=banks)
            out["rqu"] += rq_words(np.asarray(lay["mult_u"])[sl], np.asarray(lay["shift_u"])[sl],
                                   t_in, bank=b, banks=banks)
        out["rqd"] += rq_words(lay["mult_d"], lay["shift_d"], t_dn, bank=n, banks=len(layers))
        out["lut"] += [pack(lut_load_layout(len(layers)), {"addr": a, "layer": n,
                                                           "value": int(lay["lut"][a])})
                       for a in range(quant.LUT_SIZE)]
        out["h"].append((int(lay["mult_h"]), int(lay["shift_h"])))
    return out
