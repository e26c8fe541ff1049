"""The SwiGLU gating stage: ``h = requant(lut[gate + 128] * up)``, ``lanes`` elements per cycle."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.requant import round_shift, saturate
from hw.silu_lut import lut_address
from hw.widths import index_bits
from sw import quant

__all__ = ["SwigluGate", "gate_in_layout", "gate_out_layout", "h_params_layout", "lut_load_layout"]


def gate_in_layout(width, layers=1, tag_bits=1):
    """A row of ``gate`` and ``up`` codes, its layer and an opaque ``tag`` passed through."""
    return data.StructLayout({"gate": data.ArrayLayout(signed(8), width),
                              "up": data.ArrayLayout(signed(8), width),
                              "layer": index_bits(layers), "tag": tag_bits})


def gate_out_layout(width, tag_bits=1):
    return data.StructLayout({"h": data.ArrayLayout(signed(8), width), "tag": tag_bits})


def lut_load_layout(layers=1):
    """One SiLU-table write: entry ``addr`` (code + 128) of layer ``layer``."""
    return data.StructLayout({"addr": 8, "layer": index_bits(layers), "value": signed(8)})


def h_params_layout():
    """The scalar requantisation of ``act * up`` (``mult_h``, ``shift_h``)."""
    return data.StructLayout({"mult": unsigned(quant.MULT_BITS), "shift": unsigned(quant.SHIFT_BITS)})


class SwigluGate(wiring.Component):
    """Takes a row of ``gate`` and ``up`` codes (``width`` each) and returns
    ``h = requantize(lut[gate + 128] * up, mult_h, shift_h)`` as in :func:`sw.quant.swiglu_int8`.

    The row is held and processed ``lanes`` elements per cycle (one SiLU table copy per lane, a
    16-bit product, the shared rounding and saturation of ``hw/requant.py``), so a row takes
    ``width / lanes + 2`` cycles. ``params`` and ``lut`` are configuration, loaded beforehand, one
    set per layer; each row names its layer.

    Parameters
    ----------
    width : int
        ``d_ff``.
    lanes : int
        Elements per cycle; ``width`` must be a multiple.
    layers : int
        Sets of table and parameters.
    tag_bits : int
        Width of the tag carried from ``i`` to ``o``.

    Members
    -------
    i : In(stream.Signature(gate_in_layout(width, layers, tag_bits)))
    o : Out(stream.Signature(gate_out_layout(width, tag_bits)))
    lut : In(stream.Signature(lut_load_layout(layers), always_ready=True))
    params : In(ArrayLayout(h_params_layout(), layers))
    """

    def __init__(self, width, lanes=8, *, layers=1, tag_bits=1):
        if width % lanes:
            raise ValueError(f"SwigluGate: width={width} is not a multiple of lanes={lanes}")
        self._width, self._lanes, self._layers, self._tag_bits = width, lanes, layers, tag_bits
        super().__init__({
            "i": In(stream.Signature(gate_in_layout(width, layers, tag_bits))),
            "o": Out(stream.Signature(gate_out_layout(width, tag_bits))),
            "lut": In(stream.Signature(lut_load_layout(layers), always_ready=True)),
            "params": In(data.ArrayLayout(h_params_layout(), layers)),
        })

    def elaborate(self, platform):
        m = Module()
        W, P = self._width, self._lanes
        chunks = W // P
        row = Signal(gate_in_layout(W, self._layers, self._tag_bits))
        par = Signal(h_params_layout())
        m.d.comb += par.eq(self.params[row.layer])
        h = Signal(data.ArrayLayout(signed(8), W))
        c_rd = Signal(range(chunks + 1))    # chunk whose table read is issued
        c_wr = Signal(range(chunks + 1))    # chunk whose result is stored (one cycle behind)
        wr_valid = Signal()

        up_d = Signal(data.ArrayLayout(signed(8), P))
        for lane in range(P):
            mem = memory.Memory(shape=signed(8), depth=quant.LUT_SIZE * self._layers, init=[])
            m.submodules[f"lut_{lane}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(domain="sync")
            g = Signal(signed(8), name=f"g_{lane}")
            with m.Switch(c_rd):
                for c in range(chunks):
                    with m.Case(c):
                        m.d.comb += g.eq(row.gate[c * P + lane])
                        m.d.sync += up_d[lane].eq(row.up[c * P + lane])
            m.d.comb += [
                wp.en.eq(self.lut.valid), wp.data.eq(self.lut.p.value),
                wp.addr.eq(self.lut.p.layer * quant.LUT_SIZE + self.lut.p.addr),
                rp.addr.eq(row.layer * quant.LUT_SIZE + lut_address(g)), rp.en.eq(1),
            ]
            prod = Signal(signed(16), name=f"prod_{lane}")
            m.d.comb += prod.eq(rp.data * up_d[lane])
            acc = Signal(signed(quant.ACC_BITS), name=f"acc_{lane}")
            m.d.comb += acc.eq(prod)
            p = Signal(signed(quant.PRODUCT_BITS), name=f"p_{lane}")
            m.d.comb += p.eq(acc * par.mult)
            q, up = round_shift(m, p, par.shift)
            y = saturate(m, q, up)
            with m.If(wr_valid):
                with m.Switch(c_wr):
                    for c in range(chunks):
                        with m.Case(c):
                            m.d.sync += h[c * P + lane].eq(y)

        m.d.comb += [self.o.p.h.eq(h), self.o.p.tag.eq(row.tag)]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += [row.eq(self.i.p), c_rd.eq(0), wr_valid.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.sync += [c_wr.eq(c_rd), wr_valid.eq(c_rd < chunks), c_rd.eq(c_rd + 1)]
                with m.If(c_rd == chunks):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += [wr_valid.eq(0), self.o.valid.eq(1)]
                m.next = "OUT"
            with m.State("OUT"):
                with m.If(self.o.ready):
                    m.d.sync += self.o.valid.eq(0)
                    m.next = "IDLE"
        return m
