"""Host side of the v2 accelerator: its configuration words (rows and outputs are packed as for v1,
by :mod:`hw.board.host`). Bit layouts come from the gateware's own layouts."""

from __future__ import annotations

from hw.accel.accelerator import ctrl_layout
from hw.accel.accelerator_v2 import TargetV2, cfg_layout_v2
from hw.accel.mv_core import gu_rq_load_layout
from hw.accel.mv_layout import gu_table_index, weight_blocks
from hw.accel.payload import pack, pack_int8
from hw.accel.row_out import rqd_load_layout
from hw.accel.swiglu_gate import h_params_layout, lut_load_layout
from sw.config import AccelConfig

__all__ = ["config_words_v2"]


def config_words_v2(cfg: AccelConfig, layers: list[dict], *, static: bool = False, chunk_rr: bool = False,
                    refresh_every: int | None = None, max_chain: int | None = None) -> list[int]:
    """Every configuration word of :class:`hw.accel.accelerator_v2.AcceleratorV2` for ``layers`` (as
    :func:`hw.board.host.trace_layers` gives them): weight blocks, tables, and the control word last."""
    if len(layers) != cfg.layers:
        raise ValueError(f"{len(layers)} layers of weights for an accelerator built for {cfg.layers}")
    lay = cfg_layout_v2(cfg)
    words = []

    def add(target, addr, data):
        words.append(pack(lay, {"target": target, "addr": addr, "data": data}))

    for a, blk in enumerate(weight_blocks(cfg, layers)):
        add(TargetV2.W, a, pack_int8(blk.reshape(-1)))
    hp = h_params_layout()
    assert gu_rq_load_layout(cfg)["p"].shape.size == hp.size
    for n, layer in enumerate(layers):
        for up, (mk, sk) in enumerate((("mult_g", "shift_g"), ("mult_u", "shift_u"))):
            for ch in range(cfg.d_ff):
                add(TargetV2.RQGU, gu_table_index(cfg, up, n, ch),
                    pack(hp, {"mult": int(layer[mk][ch]), "shift": int(layer[sk][ch])}))
        for ch in range(cfg.d_model):
            add(TargetV2.RQD, 0, pack(rqd_load_layout(cfg), {
                "layer": n, "ob": ch // cfg.mv_out, "n": ch % cfg.mv_out,
                "p": {"mult": int(layer["mult_d"][ch]), "shift": int(layer["shift_d"][ch])}}))
        for a in range(256):
            add(TargetV2.LUT, 0, pack(lut_load_layout(cfg.layers), {"addr": a, "layer": n,
                                                                    "value": int(layer["lut"][a])}))
        add(TargetV2.H, n, pack(hp, {"mult": int(layer["mult_h"]), "shift": int(layer["shift_h"])}))
    ctrl = {"static": int(static), "chunk_rr": int(chunk_rr), "refresh_en": int(refresh_every is not None),
            "refresh_every": refresh_every or 0, "max_chain_en": int(max_chain is not None),
            "max_chain": max_chain or 0}
    add(TargetV2.CTRL, 0, pack(ctrl_layout(), ctrl))
    return words

