"""SiLU by lookup: int8 gate codes -> int8 activations, ``lanes`` per beat."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from sw.golden import quant

__all__ = ["SiluLut", "lut_address"]


def lut_address(code):
    """Table address of an int8 code: ``code + 128``, i.e. the code with its sign bit flipped
    (:func:`sw.golden.quant.apply_lut`)."""
    return Cat(code[:7], ~code[7])


class SiluLut(wiring.Component):
    """The 256-entry SiLU table of :func:`sw.golden.quant.silu_lut`, applied to ``lanes`` codes per beat.

    Each lane has its own copy of the table (one read port per lane), written together through
    ``load``: entry ``addr`` is ``lut[addr]`` for gate code ``addr - 128``. One pipeline stage
    (synchronous read); ``o`` holds its beat until taken.

    Parameters
    ----------
    lanes : int
        Codes per beat.

    Members
    -------
    i : In(stream.Signature(ArrayLayout(signed(8), lanes)))
        Gate codes.
    o : Out(stream.Signature(ArrayLayout(signed(8), lanes)))
        ``lut[code + 128]`` per lane.
    load : In(stream.Signature({addr: 8, value: signed(8)}, always_ready=True))
        Table writes.
    """

    def __init__(self, lanes):
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"SiluLut lanes must be a positive integer, not {lanes!r}")
        self._lanes = lanes
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(8), lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), lanes))),
            "load": In(stream.Signature(data.StructLayout({"addr": 8, "value": signed(8)}),
                                        always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        en = Signal()
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        for lane in range(self._lanes):
            mem = memory.Memory(shape=signed(8), depth=quant.LUT_SIZE, init=[])
            m.submodules[f"table_{lane}"] = mem
            wr = mem.write_port()
            rd = mem.read_port(domain="sync")
            m.d.comb += [
                wr.en.eq(self.load.valid), wr.addr.eq(self.load.p.addr), wr.data.eq(self.load.p.value),
                rd.addr.eq(lut_address(self.i.p[lane])), rd.en.eq(en),
                self.o.p[lane].eq(rd.data),
            ]
        with m.If(en):
            m.d.sync += self.o.valid.eq(self.i.valid)
        return m
