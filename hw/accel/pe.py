"""One processing element of the systolic array."""

from amaranth import *
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.mult18 import Mult18
from hw.lib.widths import index_bits
from sw.golden import quant

__all__ = ["ProcessingElement"]


class ProcessingElement(wiring.Component):
    """int8 multiply-accumulate cell with its own weight memory, shared by ``lanes`` MACs.

    The activation ``x`` enters from the left together with the weight address ``addr`` and is
    passed, one cycle later, to the right neighbour. The cell reads its weight for that address
    from a private synchronous memory and multiplies it with the activation in a registered
    multiplier (:class:`hw.lib.mult18.Mult18`: on the ECP5 a ``MULT18X18D`` with its input and output
    registers), then adds the partial sum from the cell above; the sum is registered towards the
    cell below::

        cycle t      x_i, addr_i arrive; memory read of w[addr_i] starts
        cycle t+1    x_o = x_i (to the right); read data out; both enter the multiplier
        cycle t+3    product registered; s_o' = s_i + x * w[addr_i]
        cycle t+4    s_o visible to the cell below

    So a wavefront that reaches cell (r, c) at ``t0 + r + c`` meets its partial sum there exactly
    when the cell above produced it; the array skews row ``r`` by ``r`` cycles. Partial sums are
    ``sum_bits`` wide: the sum of at most ``rows`` products (18 bits for 4 rows), sign-extended
    into the 32-bit column accumulator below the array.

    With ``lanes > 1`` the cell holds that many independent MACs (one per core), each with its own
    activation, address and sum path and its own read port of the one weight memory. Two lanes map
    onto the two ports of an ECP5 block RAM, so two cores share one copy of the weights.

    Parameters
    ----------
    depth : int
        Words of weight memory (``banks * k_tiles * n_tiles`` of the tile).
    lanes : int
        MACs sharing the memory (cores).
    sum_bits : int
        Width of the partial sums (see :func:`hw.lib.widths.sum_bits`).

    Members
    -------
    x_i, addr_i, v_i : In(...).array(lanes)
        Activation, weight address and valid from the left, per lane.
    x_o, addr_o, v_o : Out(...).array(lanes)
        The same, one cycle later, to the right.
    s_i : In(signed(sum_bits)).array(lanes)
        Partial sum from above (0 for the top row).
    s_o : Out(signed(sum_bits)).array(lanes)
        Partial sum to the cell below.
    we, waddr, wdata : In
        Weight memory write port (weight loading).
    """

    def __init__(self, depth, lanes=1, sum_bits=quant.ACC_BITS):
        for name, v in (("depth", depth), ("lanes", lanes), ("sum_bits", sum_bits)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"PE weight memory {name} must be a positive integer, not {v!r}")
        self._depth, self._lanes = depth, lanes
        aw = index_bits(depth)
        L = lanes
        super().__init__({
            "x_i": In(signed(8)).array(L), "addr_i": In(aw).array(L), "v_i": In(1).array(L),
            "x_o": Out(signed(8)).array(L), "addr_o": Out(aw).array(L), "v_o": Out(1).array(L),
            "s_i": In(signed(sum_bits)).array(L), "s_o": Out(signed(sum_bits)).array(L),
            "we": In(1), "waddr": In(aw), "wdata": In(signed(8)),
        })

    #: Cycles from ``x_i``/``addr_i`` to the product being added (memory read, multiplier).
    latency = 1 + Mult18.latency

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        # Two read ports on one copy: Amaranth's synchronous read ports promise old data on a
        # same-cycle read of the written address, which a DP16KD only gives on the writing port,
        # so Yosys would duplicate the memory for the second lane. Asynchronous reads, our own
        # output register and ``no_rw_check`` let it map both lanes onto the two ports of one
        # block RAM (measured: depth 6144, two lanes -> 3 DP16KD, not 6). The price is that a
        # read of the address being written in the same cycle is undefined on the chip; loading
        # and computing never overlap.
        m.submodules.mem = mem = memory.Memory(shape=signed(8), depth=self._depth, init=[],
                                               attrs={"no_rw_check": 1})
        wr = mem.write_port()
        # Lane 0 reads at the write address while loading, so that the write and lane 0's read
        # share one address and one port (A); lane 1 uses port B.
        addr0 = Signal.like(self.addr_i[0])
        m.d.comb += [
            addr0.eq(Mux(self.we, self.waddr, self.addr_i[0])),
            wr.en.eq(self.we), wr.addr.eq(addr0), wr.data.eq(self.wdata),
        ]
        for lane in range(self._lanes):
            rd = mem.read_port(domain="comb")
            m.d.comb += rd.addr.eq(addr0 if lane == 0 else self.addr_i[lane])
            q = Signal(signed(8), name=f"q_{lane}", reset_less=True)   # the block RAM's output register
            m.submodules[f"mul_{lane}"] = mul = Mult18(8, 8)
            m.d.comb += [mul.a.eq(self.x_o[lane]), mul.b.eq(q)]
            m.d.sync += [
                q.eq(rd.data),
                self.x_o[lane].eq(self.x_i[lane]),
                self.addr_o[lane].eq(self.addr_i[lane]),
                self.v_o[lane].eq(self.v_i[lane]),
                self.s_o[lane].eq(self.s_i[lane] + mul.p),
            ]
        return m
