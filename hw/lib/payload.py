"""Packing values into the gateware's stream payloads, and back: the one packer of the project.

The bit layout of every payload is defined once, by the Amaranth layouts in ``hw/``; these helpers
read the offsets and widths from those layouts instead of re-stating them, so the testbenches, the
board's host program and the gateware cannot disagree. :func:`pack` takes a value shaped as the
layout (a dict for a struct, a sequence or numpy array for an array, an int for a scalar) and
gives what ``layout.const(value)`` gives, about 100x faster (the thousands of rows of a trace);
:func:`fields`, :func:`pack_fields` and :func:`unpack_field` address a layout's leaves by dotted
name (``"data.y.3"``), as the cocotb benches do.
"""

import functools

import numpy as np
from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = ["fields", "pack", "pack_fields", "pack_int8", "unpack_field", "unpack_int8"]


def _scalar(shape: Shape, v, name: str) -> int:
    v = int(v)
    w = shape.width
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if shape.signed else (0, (1 << w) - 1)
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v} does not fit in {'signed' if shape.signed else 'unsigned'}({w})")
    return v & ((1 << w) - 1)


def pack(layout, value, name: str = "payload") -> int:
    """Bits of ``layout.const(value)`` as a non-negative int; a struct's missing fields are 0, and a
    value that does not fit its field is a :class:`ValueError` naming the field."""
    if isinstance(layout, data.StructLayout):
        bits = 0
        for field, f in layout:
            if field in value:
                bits |= pack(f.shape, value[field], field if name == "payload" else f"{name}.{field}") << f.offset
        return bits
    if isinstance(layout, data.ArrayLayout):
        elem = Shape.cast(layout.elem_shape)
        a = np.asarray(value).reshape(-1) if not isinstance(layout.elem_shape, data.Layout) else list(value)
        if len(a) != layout.length:
            raise ValueError(f"{name}: expected {layout.length} values, not {len(a)}")
        if elem.width == 8 and not isinstance(layout.elem_shape, data.Layout):
            lo, hi = (-128, 127) if elem.signed else (0, 255)
            if a.size and (int(a.min()) < lo or int(a.max()) > hi):
                raise ValueError(f"{name}: expected {layout.length} values in [{lo}, {hi}]")
            return int.from_bytes(a.astype(np.int64).astype(np.int8 if elem.signed else np.uint8).tobytes(),
                                  "little")
        bits = 0
        for i, v in enumerate(a):
            bits |= pack(layout.elem_shape, v, f"{name}[{i}]") << (i * elem.width)
        return bits
    return _scalar(Shape.cast(layout), value, name)


def pack_int8(vec) -> int:
    """int8 vector -> payload of ``ArrayLayout(signed(8), len(vec))`` (element 0 in the LSBs)."""
    vec = np.asarray(vec)
    return pack(data.ArrayLayout(Shape(8, True), len(vec)), vec)


def unpack_int8(bits: int, n: int) -> np.ndarray:
    """Payload of ``ArrayLayout(signed(8), n)`` -> int8 vector."""
    return np.frombuffer(int(bits).to_bytes(n, "little"), dtype=np.int8).copy()


@functools.lru_cache(maxsize=64)
def _fields(layout, prefix: str) -> tuple:
    out = []
    for name, f in layout:
        if isinstance(f.shape, data.Layout):
            out += [(f"{prefix}{name}.{sub}", f.offset + o, w, s) for sub, o, w, s in _fields(f.shape, "")]
        else:
            sh = Shape.cast(f.shape)
            out.append((f"{prefix}{name}", f.offset, sh.width, sh.signed))
    return tuple(out)


def fields(layout, prefix: str = "") -> dict:
    """``{dotted name: (offset, width, signed)}`` of a (nested) struct or array layout's leaves, an
    array's elements named by their index."""
    return {n: (o, w, s) for n, o, w, s in _fields(layout, prefix)}


def pack_fields(fl: dict, **values) -> int:
    """A word from leaves of :func:`fields` by name (each value taken modulo its width)."""
    word = 0
    for name, v in values.items():
        o, w, _ = fl[name]
        word |= (int(v) & ((1 << w) - 1)) << o
    return word


def unpack_field(fl: dict, word: int, name: str) -> int:
    """The value of leaf ``name`` of :func:`fields` in ``word`` (sign-extended where signed)."""
    o, w, s = fl[name]
    v = (word >> o) & ((1 << w) - 1)
    return v - (1 << w) if s and v >> (w - 1) else v
