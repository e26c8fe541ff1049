"""Host side of the accelerator: configuration words and row beats from a decode trace, and the
reverse for its outputs. Bit layouts come from the gateware's own layouts (``hw/accel/accelerator.py``)."""

from __future__ import annotations

import functools

import numpy as np
from amaranth.hdl import Shape
from amaranth.lib import data

from hw.accel.accelerator import Target, cfg_layout, ctrl_layout, row_in_layout
from hw.accel.payload import mlp_loads, pack
from hw.accel.requant import load_layout
from hw.accel.swiglu_gate import h_params_layout
from hw.accel.systolic_array import weight_layout
from sw.config import AccelConfig

__all__ = ["trace_layers", "config_words", "pack_struct", "row_beats", "group_frames", "group_beats",
           "unpack_y"]


def trace_layers(tr) -> list[dict]:
    """Per layer: weights and integer constants of a decode trace, as :func:`hw.accel.payload.mlp_loads`
    takes."""
    return [dict(wg=tr.wg[n], wu=tr.wu[n], wd=tr.wd[n], **tr.layer_consts(n))
            for n in range(tr.dims["layers"])]


def config_words(cfg: AccelConfig, layers: list[dict], *, static: bool = False, chunk_rr: bool = False,
                 refresh_every: int | None = None, max_chain: int | None = None) -> list[int]:
    """Every configuration word for ``layers``: weights, tables and the control word (last), for
    the datapath ``cfg`` builds (v2: :func:`hw.board.host_v2.config_words_v2`).

    The control word selects the schedule: DRS by default, ``static`` (row ``b`` on core
    ``b mod cores``) or ``chunk_rr`` (chunk ``j`` on core ``j mod cores``; ignored when ``static``).
    """
    if cfg.datapath == 2:
        from hw.board.host_v2 import config_words_v2
        return config_words_v2(cfg, layers, static=static, chunk_rr=chunk_rr, refresh_every=refresh_every,
                               max_chain=max_chain)
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
    ctrl = {"static": int(static), "chunk_rr": int(chunk_rr), "refresh_en": int(refresh_every is not None),
            "refresh_every": refresh_every or 0, "max_chain_en": int(max_chain is not None),
            "max_chain": max_chain or 0}
    add(Target.CTRL, 0, pack(ctrl_layout(), ctrl))
    return words


@functools.lru_cache(maxsize=16)
def _int8_struct_fields(layout: data.StructLayout) -> list[tuple[str, int, int, int | None, bool]]:
    """``(name, offset, width, length, signed)`` of each field of a struct whose members are scalars
    or arrays of 8-bit integers, read from the layout itself (``length`` is None for a scalar)."""
    fields = []   # returned from a cache: callers must not change it
    for name in layout.members:
        f = layout[name]
        if isinstance(f.shape, data.ArrayLayout):
            elem = Shape.cast(f.shape.elem_shape)
            if elem.width != 8:
                raise TypeError(f"{name}: only arrays of 8-bit elements are packed here, not {elem}")
            fields.append((name, f.offset, f.width, f.shape.length, elem.signed))
        else:
            shape = Shape.cast(f.shape)
            fields.append((name, f.offset, shape.width, None, shape.signed))
    return fields


def pack_struct(layout: data.StructLayout, value: dict) -> int:
    """Bits of ``layout.const(value)`` (:func:`hw.accel.payload.pack`) for structs of scalars and int8
    arrays, by the layout's own field offsets but without going through Amaranth's constant
    machinery (about 100x faster, which matters for the thousands of rows of a trace). An array
    field takes a numpy array or a sequence; a value that does not fit its field is an error."""
    bits = 0
    for name, offset, width, length, signed in _int8_struct_fields(layout):
        v = value[name]
        if length is not None:
            a = np.asarray(v).reshape(-1)
            lo, hi = (-128, 127) if signed else (0, 255)
            if a.size != length or (a.size and (a.min() < lo or a.max() > hi)):
                raise ValueError(f"{name}: expected {length} values in [{lo}, {hi}]")
            word = int.from_bytes(a.astype(np.int8 if signed else np.uint8).tobytes(), "little")
        else:
            v = int(v)
            lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
            if not lo <= v <= hi:
                raise ValueError(f"{name}: {v} does not fit in {'signed' if signed else 'unsigned'}({width})")
            word = v & ((1 << width) - 1)
        bits |= word << offset
    return bits


def row_beats(cfg: AccelConfig, tr, g: int, *, threshold: int | None = None,
              layout=None) -> list[tuple[int, bool]]:
    """``(data bits, last)`` of the rows of group ``g`` of a decode trace (``threshold`` overrides
    the trace's, e.g. ``2**31`` for a dense run; ``layout``: :func:`row_in_layout` if given)."""
    lay = layout if layout is not None else row_in_layout(cfg)
    n = int(tr.group_layer[g])
    B = tr.dims["batch"]
    beats = []
    for b in range(B):
        beats.append((pack_struct(lay, {
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
