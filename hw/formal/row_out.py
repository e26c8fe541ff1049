"""The output stage: every row whose chunks are all done leaves on ``o`` exactly once, and ``o``
keeps the stream rule."""

from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.accel.row_out import RowOut
from hw.formal.harness import PropertyWrapper, in_ports, stream_hold
from hw.lib.widths import index_bits

__all__ = ["RowOutRows"]


class RowOutRows(PropertyWrapper):
    """Scoreboard of a :class:`hw.accel.row_out.RowOut` fed by ``cores`` free ``done`` streams.

    The ``done`` streams keep the contract of the :class:`hw.accel.mv_core.MvCore`\\ s in a
    :class:`hw.accel.mlp_engine.MlpEngine`: each core reports at most one finished D pass per cycle
    (one ``done`` stream each, always ready), every chunk of a row finishes once, so a row (``tag``
    below ``batch``, ``layer`` below ``layers``) gets exactly ``chunks`` dones over all cores, in any
    split and order between them and with any number in the same cycle, and no done of a row
    arrives between its last chunk and the cycle it leaves on ``o`` (the next use of a tag is a
    row of the next group, which starts after the whole group has left). The accumulator data,
    ``acc_touched``, the table writes and ``o.ready`` are free.

    The wrapper keeps, per row, the dones received and whether the row is complete and not yet
    gone, and checks in every cycle:

    - **no row invented, duplicated or early**: a row leaves (``o.valid & o.ready``) only while it
      is complete and not yet gone, with its own ``tag``; it is gone after that;
    - **no row lost**: a complete row leaves within ``batch * (latency + 1) + 1`` cycles in
      which ``o`` does not wait on ``ready`` (one row at a time, ``latency + 1`` cycles each);
      a count that missed a done (two cores finishing together counted once) leaves its row
      incomplete forever and fails this;
    - **stream rule** on ``o``: ``valid`` and the payload held until ``ready``.

    Rows complete at once leave in tag order (the :class:`hw.lib.reorder_buffer.ReorderBuffer`
    after the stage restores row order), so no order between rows is asserted here; each tag's
    rows leave in the order they complete, since the next row of a tag starts after the last left.

    Covers: both cores finishing in the same cycle (for the same row), and a row leaving after
    waiting on ``ready``.

    Parameters
    ----------
    cfg : AccelConfig
        Geometry (``batch``, ``chunks``, ``layers``, ``d_model``, ``mv_out``).
    cores : int
    dut_class : type
        The stage's class (a planted-bug copy in the failing twin tests).
    """

    def __init__(self, cfg, *, cores=2, dut_class=RowOut):
        super().__init__()
        self.cfg, self.cores = cfg, cores
        self.dut = dut_class(cfg, cores=cores, tag_bits=index_bits(cfg.batch))
        self.free(*in_ports(self.dut))

    def elaborate(self, platform):
        m = self.module()
        dut = self.dut
        m.submodules.dut = dut
        cfg, P = self.cfg, self.cores
        B, S = cfg.batch, cfg.chunks
        bound = B * (dut.latency + 1) + 1

        for p in range(P):
            with m.If(dut.done[p].valid):
                m.d.comb += [Assume(dut.done[p].p.tag < B, "done: tag below batch"),
                             Assume(dut.done[p].p.layer < cfg.layers, "done: layer below layers")]
        gave = dut.o.valid & dut.o.ready
        stalled = dut.o.valid & ~dut.o.ready
        for b in range(B):
            got = Signal(range(S + 1), name=f"got_{b}")          # dones of row b so far
            waited = Signal(range(bound + 1), name=f"waited_{b}")
            complete = got == S
            hits = [dut.done[p].valid & (dut.done[p].p.tag == b) for p in range(P)]
            inc = Signal(range(P + 1), name=f"hits_{b}")
            m.d.comb += inc.eq(sum(hits))
            m.d.comb += Assume(got + inc <= S, "a row gets exactly `chunks` dones (each chunk once)")
            leaves = gave & (dut.o.p.tag == b)
            with m.If(leaves):
                m.d.comb += Assert(complete, "a row leaves only once all its chunks are done, and only once")
                m.d.sync += [got.eq(inc), waited.eq(0)]
            with m.Else():
                m.d.sync += got.eq(got + inc)
                with m.If(complete & ~stalled & (waited != bound)):
                    m.d.sync += waited.eq(waited + 1)
            with m.If(complete):
                m.d.comb += Assume(inc == 0, "no done of a complete row before it has left")
            m.d.comb += Assert(~complete | (waited < bound),
                               "a complete row leaves on o in time (no row lost)")
            self.cover(m, Cat(hits).all(), f"every core finishes a chunk of row {b} in the same cycle")
        self.cover(m, Cat(dut.done[p].valid for p in range(P)).all(), "every core's done valid in one cycle")
        waiting = stream_hold(m, dut.o, name="o")
        self.cover(m, waiting & gave, "o: a row waits, then leaves")
        return m
