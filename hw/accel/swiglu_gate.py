"""The SwiGLU gating stage: ``h = requant(lut[gate + 128] * up)``, ``lanes`` elements per cycle."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.requant import round_shift, saturate, shift_controls
from hw.accel.silu_lut import lut_address
from hw.lib.mult18 import Mult18
from hw.lib.widths import index_bits
from sw.golden import quant

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
    ``h = requantize(lut[gate + 128] * up, mult_h, shift_h)`` as in :func:`sw.golden.quant.swiglu_int8`.

    The row is held and processed ``lanes`` elements per cycle through a pipeline per lane: the
    SiLU table read (one table copy per lane), ``silu * up`` and ``* mult_h`` in two registered
    DSP multipliers (:class:`hw.lib.mult18.Mult18`), the rounding shift of ``hw/accel/requant.py``
    registered, then saturation into the held result; a row takes
    ``width / lanes + PIPELINE + 2`` cycles. ``params`` and ``lut`` are configuration, loaded
    beforehand, one set per layer; each row names its layer.

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

    #: Cycles from issuing an element's table read to storing its result.
    PIPELINE = 1 + 2 * Mult18.latency + 1

    def elaborate(self, platform):
        m = Module()
        W, P = self._width, self._lanes
        chunks = W // P
        row = Signal(gate_in_layout(W, self._layers, self._tag_bits))
        par = Signal(h_params_layout())
        m.d.comb += par.eq(self.params[row.layer])
        h = Signal(data.ArrayLayout(signed(8), W))
        c_rd = Signal(range(chunks + 1))    # chunk whose table read is issued
        issue = Signal()
        # (valid, chunk) of every issued read, delayed to the cycle its result is stored.
        pipe = [(Signal(name=f"pipe_v{d}"), Signal(range(chunks + 1), name=f"pipe_c{d}"))
                for d in range(self.PIPELINE)]
        m.d.sync += [pipe[0][0].eq(issue), pipe[0][1].eq(c_rd)]
        for d in range(1, self.PIPELINE):
            m.d.sync += [pipe[d][0].eq(pipe[d - 1][0]), pipe[d][1].eq(pipe[d - 1][1])]
        wr_valid, c_wr = pipe[-1]
        busy = Signal()
        m.d.comb += busy.eq(Cat(v for v, _ in pipe).any())

        # The layer's shift controls, registered: the row (and so its layer) is fixed from the
        # cycle after it is taken, and the first product reaches the shifter PIPELINE - 1 cycles
        # after the first table read, so they are settled long before.
        controls = shift_controls(m, par.shift, 16 + quant.MULT_BITS + 1 + 1, domain="sync", name="shift_h")
        for lane in range(P):
            mem = memory.Memory(shape=signed(8), depth=quant.LUT_SIZE * self._layers, init=[])
            m.submodules[f"lut_{lane}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(domain="sync")
            g = Signal(signed(8), name=f"g_{lane}")
            up_d = Signal(signed(8), name=f"up_d_{lane}")
            with m.Switch(c_rd):
                for c in range(chunks):
                    with m.Case(c):
                        m.d.comb += g.eq(row.gate[c * P + lane])
                        m.d.sync += up_d.eq(row.up[c * P + lane])
            m.d.comb += [
                wp.en.eq(self.lut.valid), wp.data.eq(self.lut.p.value),
                wp.addr.eq(self.lut.p.layer * quant.LUT_SIZE + self.lut.p.addr),
                rp.addr.eq(row.layer * quant.LUT_SIZE + lut_address(g)), rp.en.eq(1),
            ]
            # silu * up (16 bits), then * mult_h; both multiplies registered in and out.
            m.submodules[f"mul_act_{lane}"] = mul_act = Mult18(8, 8)
            m.submodules[f"mul_h_{lane}"] = mul_h = Mult18(16, quant.MULT_BITS + 1)
            m.d.comb += [mul_act.a.eq(rp.data), mul_act.b.eq(up_d),
                         mul_h.a.eq(mul_act.p), mul_h.b.eq(par.mult)]
            assert len(mul_h.p) + 1 == len(controls[1])
            q, up = round_shift(m, mul_h.p, controls=controls)
            q_r = Signal.like(q, name=f"q_r_{lane}")
            up_r = Signal(name=f"up_r_{lane}")
            m.d.sync += [q_r.eq(q), up_r.eq(up)]
            y = saturate(m, q_r, up_r)
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
                    m.d.sync += [row.eq(self.i.p), c_rd.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += issue.eq(1)
                m.d.sync += c_rd.eq(c_rd + 1)
                with m.If(c_rd == chunks - 1):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(~busy & ~wr_valid):
                    m.d.sync += self.o.valid.eq(1)
                    m.next = "OUT"
            with m.State("OUT"):
                with m.If(self.o.ready):
                    m.d.sync += self.o.valid.eq(0)
                    m.next = "IDLE"
        return m
