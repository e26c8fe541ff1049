"""The weight store: a read on either port returns the block last written at its address, at the
store's read latency."""

from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.accel.weight_store import BANK_WORDS, WeightStore
from hw.formal.harness import PropertyWrapper, in_ports

__all__ = ["WeightStoreMemory", "two_bank_config"]


def two_bank_config():
    """The smallest store with two banks per lane (the second one partial) and two lanes: 2 x 2
    blocks, ``mv_weight_blocks = 1032`` (bank 0: blocks 0 .. 1023, bank 1: 1024 .. 1031)."""
    from sw.config import AccelConfig

    # d_model 4: the smallest that the cores could schedule (a GU run as long as mv_out); only the
    # store's geometry matters here.
    cfg = AccelConfig(d_model=4, d_ff=344, layers=1, chunks=1, mv_in=2, mv_out=2, tas_lanes=2)
    assert BANK_WORDS < cfg.mv_weight_blocks < 2 * BANK_WORDS
    return cfg


class WeightStoreMemory(PropertyWrapper):
    """Memory scoreboard of a :class:`hw.accel.weight_store.WeightStore` on the geometry of
    :func:`two_bank_config` (two lanes of two banks, so a wrong bank select on a write or on a
    port's read is visible).

    Writes and reads follow the store's documented contract: addresses below ``depth`` on ``w``
    and both ``r_addr`` ports (what the host and the cores use); port B does not read the block
    written in the same cycle (undefined on the DP16KD). Everything else is free in every cycle:
    write data, whether a write happens, both read addresses.

    The wrapper watches one block ``addr0``, chosen by the solver and then fixed, with a copy of
    the value last written to it, and checks, for each port ``p``:

    - a read of ``addr0`` presented in cycle t returns on ``r_data[p]`` in cycle
      ``t + WeightStore.latency`` the value of the last write of ``addr0`` presented before t,
      whatever was written to other blocks, or read on the other port, in between. A port-A read
      presented in a write cycle is dropped by the store (documented) and is not checked.

    Covers: each port reads back a written block.

    Parameters
    ----------
    dut_class : type
        The store's class (a planted-bug copy in the failing twin tests).
    cfg : AccelConfig, optional
        Geometry (default :func:`two_bank_config`).
    """

    def __init__(self, *, dut_class=WeightStore, cfg=None):
        super().__init__()
        import math

        cfg = two_bank_config() if cfg is None else cfg
        self.cfg = cfg
        # As the MlpEngine builds it: one copy of the read address per group of up to 4 lanes.
        self.dut = dut_class(cfg, lanes_per_copy=math.gcd(4, cfg.mv_in * cfg.mv_out // 2))
        self.free(*in_ports(self.dut))
        self.addr0 = Signal.like(self.dut.w.p.addr, name="addr0")
        self.free(self.addr0)

    def elaborate(self, platform):
        m = self.module()
        dut = self.dut
        m.submodules.dut = dut
        depth = dut.depth
        self.constant(m, self.addr0, name="addr0")
        m.d.comb += Assume(self.addr0 < depth, "addr0 in range")
        w = dut.w
        # Writes at any address, out-of-range ones included: they must write nothing.
        for p in range(2):
            m.d.comb += Assume(dut.r_addr[p] < depth, f"port {p} read address in range")
        with m.If(w.valid):
            m.d.comb += Assume(dut.r_addr[1] != w.p.addr, "port B does not read the block being written")

        known = Signal()                                   # addr0 has been written
        value = Signal.like(w.p.data, name="value")        # what was last written to it
        with m.If(w.valid & (w.p.addr == self.addr0)):
            m.d.sync += [known.eq(1), value.eq(w.p.data)]

        latency = dut.latency
        for p in range(2):
            due, expect = known & (dut.r_addr[p] == self.addr0), value
            if p == 0:
                due = due & ~w.valid
            for c in range(latency):
                d = Signal(name=f"due_{p}_d{c}")
                e = Signal.like(value, name=f"expect_{p}_d{c}")
                m.d.sync += [d.eq(due), e.eq(expect)]
                due, expect = d, e
            with m.If(due):
                m.d.comb += Assert(Value.cast(dut.r_data[p]) == Value.cast(expect),
                                   f"port {'AB'[p]} returns the block last written, {latency} cycles later")
            self.cover(m, due & (self.addr0 >= BANK_WORDS), f"port {'AB'[p]} reads back a block of bank 1")
        return m
