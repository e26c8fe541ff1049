"""Host side of the accelerator: configuration words and row beats from a decode trace, and the
reverse for its outputs. Bit layouts come from the gateware's own layouts (``hw/accelerator.py``)."""

from __future__ import annotations

import numpy as np

from hw.accelerator import Target, cfg_layout, ctrl_layout, row_in_layout
from hw.payload import mlp_loads, pack
from hw.requant import load_layout
from hw.swiglu_gate import h_params_layout
from hw.systolic_array import weight_layout
from sw.config import AccelConfig

__all__ = ["trace_layers", "config_words", "row_beats", "group_beats", "unpack_y"]


def trace_layers(tr) -> list[dict]:
    """Per layer: weights and integer constants of a decode trace, as :func:`hw.payload.mlp_loads` takes."""
    return [dict(wg=tr.wg[n], wu=tr.wu[n], wd=tr.wd[n], **tr.layer_consts(n))
            for n in range(tr.dims["layers"])]


def config_words(cfg: AccelConfig, layers: list[dict], *, static: bool = False,
                 refresh_every: int | None = None, max_chain: int | None = None) -> list[int]:
    """Every configuration word for ``layers``: weights, tables and the control word (last)."""
    if len(layers) != cfg.layers:
        raise ValueError(f"{len(layers)} layers of weights for an accelerator built for {cfg.layers}")
    lay = cfg_layout(cfg)
    t_in, t_dn = cfg.gate_tile, cfg.down_tile
    banks = cfg.layers * cfg.chunks
    loads = mlp_loads(layers, cfg.chunks, t_in, t_dn)
    words = []

    def add(target, addr, data):
        words.append(pack(lay, {"target": target, "addr": addr, "data": data}))

    for name, target, tile in (("wg", Target.WG, t_in), ("wu", Target.WU, t_in), ("wd", Target.WD, t_dn)):
        wl = weight_layout(tile, banks)
        for w in loads[name]:
            aw = wl["addr"].width
            add(target, w & ((1 << aw) - 1), w >> aw)
    for name, target, tile, nb in (("rqg", Target.RQG, t_in, banks), ("rqu", Target.RQU, t_in, banks),
                                   ("rqd", Target.RQD, t_dn, cfg.layers)):
        ll = load_layout(cfg.cols, nb * tile.n_tiles)
        aw = ll["addr"].width
        for w in loads[name]:
            add(target, w & ((1 << aw) - 1), w >> aw)
    for w in loads["lut"]:
        add(Target.LUT, 0, w)
    for n, (mult, shift) in enumerate(loads["h"]):
        add(Target.H, n, pack(h_params_layout(), {"mult": mult, "shift": shift}))
    ctrl = {"static": int(static), "refresh_en": int(refresh_every is not None),
            "refresh_every": refresh_every or 0, "max_chain_en": int(max_chain is not None),
            "max_chain": max_chain or 0}
    add(Target.CTRL, 0, pack(ctrl_layout(), ctrl))
    return words


def row_beats(cfg: AccelConfig, tr, g: int, *, threshold: int | None = None) -> list[tuple[int, bool]]:
    """``(data bits, last)`` of the rows of group ``g`` of a decode trace (``threshold`` overrides
    the trace's, e.g. ``2**31`` for a dense run)."""
    lay = row_in_layout(cfg)
    n = int(tr.group_layer[g])
    B = tr.dims["batch"]
    beats = []
    for b in range(B):
        beats.append((pack(lay, {
            "x": [int(v) for v in tr.x[g, b]],
            "q": [int(v) for v in np.asarray(tr.q[g, b]).reshape(-1)],
            "k": [int(v) for v in np.asarray(tr.k_prev[g, b]).reshape(-1)],
            "threshold": int(tr.threshold[n]) if threshold is None else threshold,
            "layer": n, "frame": int(tr.group_frame[g]), "index": int(tr.group_index[g]), "row": b,
        }), b == B - 1))
    return beats


def unpack_y(bits: int, d: int) -> np.ndarray:
    return np.frombuffer(int(bits & ((1 << 8 * d) - 1)).to_bytes(d, "little"), dtype=np.int8).copy()


def group_beats(cfg: AccelConfig, tr, g: int, row_bytes: int, *, threshold: int | None = None) -> bytes:
    """Group ``g`` as the bytes of one AXI4-Stream frame of ``row_bytes``-wide beats."""
    return b"".join(bits.to_bytes(row_bytes, "little")
                    for bits, _ in row_beats(cfg, tr, g, threshold=threshold))
