"""The SwiGLU gating stage: ``h = requant(lut[gate + 128] * up)``, ``lanes`` elements per cycle."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.requant import round_shift, saturate
from hw.silu_lut import lut_address
from sw import quant

__all__ = ["SwigluGate", "gate_in_layout", "h_params_layout"]


def gate_in_layout(width):
    return data.StructLayout({"gate": data.ArrayLayout(signed(8), width),
                              "up": data.ArrayLayout(signed(8), width)})


def h_params_layout():
    """The scalar requantisation of ``act * up`` (``mult_h``, ``shift_h``)."""
    return data.StructLayout({"mult": unsigned(quant.MULT_BITS), "shift": unsigned(quant.SHIFT_BITS)})


class SwigluGate(wiring.Component):
    """Takes a row of ``gate`` and ``up`` codes (``width`` each) and returns
    ``h = requantize(lut[gate + 128] * up, mult_h, shift_h)`` as in :func:`sw.quant.swiglu_int8`.

    The row is held and processed ``lanes`` elements per cycle (one SiLU table copy per lane, a
    16-bit product, the shared rounding and saturation of ``hw/requant.py``), so a row takes
    ``width / lanes + 2`` cycles. ``params`` and ``lut`` are configuration, loaded beforehand.

    Parameters
    ----------
    width : int
        ``d_ff``.
    lanes : int
        Elements per cycle; ``width`` must be a multiple.

    Members
    -------
    i : In(stream.Signature(gate_in_layout(width)))
    o : Out(stream.Signature(ArrayLayout(signed(8), width)))
    lut : In(stream.Signature({addr: 8, value: signed(8)}, always_ready=True))
    params : In(h_params_layout())
    """

    def __init__(self, width, lanes=8):
        if width % lanes:
            raise ValueError(f"SwigluGate: width={width} is not a multiple of lanes={lanes}")
        self._width, self._lanes = width, lanes
        super().__init__({
            "i": In(stream.Signature(gate_in_layout(width))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), width))),
            "lut": In(stream.Signature(data.StructLayout({"addr": 8, "value": signed(8)}),
                                       always_ready=True)),
            "params": In(h_params_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        W, P = self._width, self._lanes
        chunks = W // P
        row = Signal(gate_in_layout(W))
        h = Signal(data.ArrayLayout(signed(8), W))
        c_rd = Signal(range(chunks + 1))    # chunk whose table read is issued
        c_wr = Signal(range(chunks + 1))    # chunk whose result is stored (one cycle behind)
        wr_valid = Signal()

        up_d = Signal(data.ArrayLayout(signed(8), P))
        for lane in range(P):
            mem = memory.Memory(shape=signed(8), depth=quant.LUT_SIZE, init=[])
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
                wp.en.eq(self.lut.valid), wp.addr.eq(self.lut.p.addr), wp.data.eq(self.lut.p.value),
                rp.addr.eq(lut_address(g)), rp.en.eq(1),
            ]
            prod = Signal(signed(16), name=f"prod_{lane}")
            m.d.comb += prod.eq(rp.data * up_d[lane])
            acc = Signal(signed(quant.ACC_BITS), name=f"acc_{lane}")
            m.d.comb += acc.eq(prod)
            p = Signal(signed(quant.PRODUCT_BITS), name=f"p_{lane}")
            m.d.comb += p.eq(acc * self.params.mult)
            q, up = round_shift(m, p, self.params.shift)
            y = saturate(m, q, up)
            with m.If(wr_valid):
                with m.Switch(c_wr):
                    for c in range(chunks):
                        with m.Case(c):
                            m.d.sync += h[c * P + lane].eq(y)

        m.d.comb += self.o.p.eq(h)
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
