"""Host side of the accelerator: configuration words and row beats from a decode trace, and the
reverse for its outputs. Bit layouts come from the gateware's own layouts (``hw/accel/layouts.py``,
``hw/accel/accelerator.py``)."""

from __future__ import annotations

import numpy as np

from hw.accel.accelerator import Target, cfg_layout
from hw.accel.layouts import ctrl_layout, h_params_layout, lut_load_layout, row_in_layout
from hw.accel.mv_core import gu_rq_load_layout
from hw.accel.mv_layout import gu_table_index, weight_blocks
from hw.accel.row_out import rqd_load_layout
from hw.lib.payload import pack, pack_int8
from sw.config import AccelConfig

__all__ = ["trace_layers", "config_words", "ctrl_word", "row_beats", "group_frames",
           "group_beats", "unpack_y"]


def trace_layers(tr) -> list[dict]:
    """Per layer: weights and integer constants of a decode trace, as :func:`config_words` takes them."""
    return [dict(wg=tr.wg[n], wu=tr.wu[n], wd=tr.wd[n], **tr.layer_consts(n))
            for n in range(tr.dims["layers"])]


def config_words(cfg: AccelConfig, layers: list[dict], *, static: bool = False, chunk_rr: bool = False,
                 refresh_every: int | None = None, max_chain: int | None = None) -> list[int]:
    """Every configuration word of :class:`hw.accel.accelerator.Accelerator` for ``layers`` (as
    :func:`trace_layers` gives them): weight blocks, tables, and the control word last.

    The control word selects the schedule: DRS by default, ``static`` (row ``b`` on core
    ``b mod cores``) or ``chunk_rr`` (chunk ``j`` on core ``j mod cores``; ignored when ``static``).
    """
    if len(layers) != cfg.layers:
        raise ValueError(f"{len(layers)} layers of weights for an accelerator built for {cfg.layers}")
    lay = cfg_layout(cfg)
    words = []

    def add(target, addr, data):
        words.append(pack(lay, {"target": target, "addr": addr, "data": data}))

    for a, blk in enumerate(weight_blocks(cfg, layers)):
        add(Target.W, a, pack_int8(blk.reshape(-1)))
    hp = h_params_layout()
    assert gu_rq_load_layout(cfg)["p"].shape.size == hp.size
    for n, layer in enumerate(layers):
        for up, (mk, sk) in enumerate((("mult_g", "shift_g"), ("mult_u", "shift_u"))):
            for ch in range(cfg.d_ff):
                add(Target.RQGU, gu_table_index(cfg, up, n, ch),
                    pack(hp, {"mult": int(layer[mk][ch]), "shift": int(layer[sk][ch])}))
        for ch in range(cfg.d_model):
            add(Target.RQD, 0, pack(rqd_load_layout(cfg), {
                "layer": n, "ob": ch // cfg.mv_out, "n": ch % cfg.mv_out,
                "p": {"mult": int(layer["mult_d"][ch]), "shift": int(layer["shift_d"][ch])}}))
        for a in range(256):
            add(Target.LUT, 0, pack(lut_load_layout(cfg.layers), {"addr": a, "layer": n,
                                                                  "value": int(layer["lut"][a])}))
        add(Target.H, n, pack(hp, {"mult": int(layer["mult_h"]), "shift": int(layer["shift_h"])}))
    words.append(ctrl_word(cfg, static=static, chunk_rr=chunk_rr, refresh_every=refresh_every,
                           max_chain=max_chain))
    return words


def ctrl_word(cfg: AccelConfig, *, static: bool = False, chunk_rr: bool = False,
              refresh_every: int | None = None, max_chain: int | None = None) -> int:
    """The control word alone (the last of :func:`config_words`): the schedule and the drift guard.
    Written between groups, it changes the schedule of the groups that follow."""
    ctrl = {"static": int(static), "chunk_rr": int(chunk_rr), "refresh_en": int(refresh_every is not None),
            "refresh_every": refresh_every or 0, "max_chain_en": int(max_chain is not None),
            "max_chain": max_chain or 0}
    return pack(cfg_layout(cfg), {"target": Target.CTRL, "addr": 0, "data": pack(ctrl_layout(), ctrl)})


def row_beats(cfg: AccelConfig, tr, g: int, *, threshold: int | None = None,
              layout=None) -> list[tuple[int, bool]]:
    """``(data bits, last)`` of the rows of group ``g`` of a decode trace (``threshold`` overrides
    the trace's, e.g. ``2**31`` for a dense run; ``layout``: :func:`row_in_layout` if given)."""
    lay = layout if layout is not None else row_in_layout(cfg)
    n = int(tr.group_layer[g])
    B = tr.dims["batch"]
    beats = []
    for b in range(B):
        beats.append((pack(lay, {
            "x": tr.x[g, b],
            "q": np.asarray(tr.q[g, b]).reshape(-1),
            "k": np.asarray(tr.k_prev[g, b]).reshape(-1),
            "threshold": int(tr.threshold[n]) if threshold is None else threshold,
            "layer": n, "frame": int(tr.group_frame[g]), "index": int(tr.group_index[g]), "row": b,
        }), b == B - 1))
    return beats


def group_frames(cfg: AccelConfig, tr, groups, *, threshold: int | None = None) -> list[list[int]]:
    """The row beats of each of ``groups`` (one list per group, as one AXI4-Stream frame)."""
    lay = row_in_layout(cfg)
    return [[bits for bits, _ in row_beats(cfg, tr, g, threshold=threshold, layout=lay)] for g in groups]


def unpack_y(bits: int, d: int) -> np.ndarray:
    return np.frombuffer(int(bits & ((1 << 8 * d) - 1)).to_bytes(d, "little"), dtype=np.int8).copy()


def group_beats(cfg: AccelConfig, tr, g: int, row_bytes: int, *, threshold: int | None = None) -> bytes:
    """Group ``g`` as the bytes of one AXI4-Stream frame of ``row_bytes``-wide beats."""
    return b"".join(bits.to_bytes(row_bytes, "little")
                    for bits, _ in row_beats(cfg, tr, g, threshold=threshold))
