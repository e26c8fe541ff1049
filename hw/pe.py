"""One processing element of the systolic array."""

from amaranth import *
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hw.widths import index_bits
from sw import quant

__all__ = ["ProcessingElement"]


class ProcessingElement(wiring.Component):
    """int8 multiply-accumulate cell with its own weight memory.

    The activation ``x`` enters from the left together with the weight address ``addr`` and is
    passed, one cycle later, to the right neighbour. The cell reads its weight for that address
    from a private synchronous memory, registers the read data (block RAM's slow clock-to-out
    stays out of the multiply path), multiplies it with the activation delayed to match and adds
    the partial sum from the cell above; the sum is registered towards the cell below::

        cycle t      x_i, addr_i arrive; memory read of w[addr_i] starts
        cycle t+1    x_o = x_i (to the right); read data registered
        cycle t+2    s_o' = s_i + x * w[addr_i]
        cycle t+3    s_o visible to the cell below

    So a wavefront that reaches cell (r, c) at ``t0 + r + c`` meets its partial sum there exactly
    when the cell above produced it; the array skews row ``r`` by ``r`` cycles.

    Parameters
    ----------
    depth : int
        Words of weight memory (``k_tiles * n_tiles`` of the tile).

    Members
    -------
    x_i, addr_i, v_i : In
        Activation, weight address and valid from the left.
    x_o, addr_o, v_o : Out
        The same, one cycle later, to the right.
    s_i : In(signed(32))
        Partial sum from above (0 for the top row).
    s_o : Out(signed(32))
        Partial sum to the cell below.
    we, waddr, wdata : In
        Weight memory write port (weight loading).
    """

    def __init__(self, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"PE weight memory depth must be a positive integer, not {depth!r}")
        self._depth = depth
        aw = index_bits(depth)
        super().__init__({
            "x_i": In(signed(8)), "addr_i": In(aw), "v_i": In(1),
            "x_o": Out(signed(8)), "addr_o": Out(aw), "v_o": Out(1),
            "s_i": In(signed(quant.ACC_BITS)), "s_o": Out(signed(quant.ACC_BITS)),
            "we": In(1), "waddr": In(aw), "wdata": In(signed(8)),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=signed(8), depth=self._depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(domain="sync")
        m.d.comb += [
            wr.en.eq(self.we), wr.addr.eq(self.waddr), wr.data.eq(self.wdata),
            rd.addr.eq(self.addr_i), rd.en.eq(1),
        ]
        w = Signal(signed(8))
        x = Signal(signed(8))
        m.d.sync += [
            self.x_o.eq(self.x_i),
            self.addr_o.eq(self.addr_i),
            self.v_o.eq(self.v_i),
            w.eq(rd.data),
            x.eq(self.x_o),
            self.s_o.eq(self.s_i + x * w),
        ]
        return m
