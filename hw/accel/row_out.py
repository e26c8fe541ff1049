"""The output stage: when every chunk of a row is done, add the cores' accumulators and requantise."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.layouts import h_params_layout, row_out_layout
from hw.accel.mv_core import done_layout
from hw.accel.mv_layout import pass_lengths
from hw.lib.ff_copies import word_copies
from hw.lib.requant_lane import RequantLane
from hw.lib.widths import index_bits, mul_const
from sw.config import AccelConfig

__all__ = ["RowOut", "rqd_load_layout"]


def rqd_load_layout(cfg: AccelConfig):
    """One write of the down requantisation table: the constants of channel ``ob * mv_out + n`` of
    ``layer``."""
    return data.StructLayout({"layer": index_bits(cfg.layers), "ob": index_bits(cfg.d_model // cfg.mv_out),
                              "n": index_bits(cfg.mv_out), "p": h_params_layout()})


class RowOut(wiring.Component):
    """Counts each row's finished chunks over all cores; when a row has all ``chunks``, reads its
    accumulator blocks from every :class:`hw.accel.mv_core.MvCore`, adds them (a core that never ran a
    chunk of the row adds nothing) and requantises the ``d_model`` sums with the layer's
    per-channel ``mult_d, shift_d``: ``y = requant(sum over chunks of h_c @ wd_c)``, which is
    :func:`sw.spec.quant.swiglu_int8`'s last step (integer sums: the order of addition does not matter).

    One output block of ``mv_out`` channels per cycle: the read address in cycle t, the cores'
    blocks and the table entry in t + 1, their sum registered in t + 2, ``mv_out``
    :class:`hw.lib.requant_lane.RequantLane` after that; the int8 block lands in the output row
    register. The row leaves on ``o`` and the next finished row starts once it has been taken,
    so ``o.ready`` only ever gates one flag.

    Parameters
    ----------
    cfg : AccelConfig
    cores : int
    tag_bits : int

    Members
    -------
    done : In(stream.Signature(done_layout(cfg, tag_bits), always_ready=True)).array(cores)
        A core finished a D pass of row ``tag``.
    acc_addr : Out(range(batch * d_model / mv_out))
    acc_data : In(ArrayLayout(signed(cfg.row_sum_bits), mv_out)).array(cores)
    acc_touched : In(1).array(cores)
        The cores' accumulator read ports (data one cycle after the address).
    rq : In(stream.Signature(rqd_load_layout(cfg), always_ready=True))
        Down requantisation table writes.
    o : Out(stream.Signature(hw.accel.layouts.row_out_layout(d_model, tag_bits)))
        Finished rows.
    """

    def __init__(self, cfg: AccelConfig, *, cores: int, tag_bits: int):
        self._cfg, self._cores, self._tb = cfg, cores, tag_bits
        self._d_ob = pass_lengths(cfg)["d_ob"]
        super().__init__({
            "done": In(stream.Signature(done_layout(cfg, tag_bits), always_ready=True)).array(cores),
            "acc_addr": Out(range(cfg.batch * self._d_ob)),
            "acc_data": In(data.ArrayLayout(signed(cfg.row_sum_bits), cfg.mv_out)).array(cores),
            "acc_touched": In(1).array(cores),
            "rq": In(stream.Signature(rqd_load_layout(cfg), always_ready=True)),
            "o": Out(stream.Signature(row_out_layout(cfg.d_model, tag_bits))),
        })

    @property
    def latency(self) -> int:
        """Cycles from a row's start (the cycle after its last ``done``) to ``o.valid``."""
        return 1 + self._d_ob + 2 + RequantLane.latency

    def elaborate(self, platform):
        m = Module()
        cfg, P, B, O, D = self._cfg, self._cores, self._cfg.batch, self._cfg.mv_out, self._d_ob
        S = cfg.chunks

        # --- chunks finished per row ---------------------------------------------------------
        # ``full`` is a register (the count's next value compared with ``chunks``), so the start
        # decision below depends on flops only.
        count = [Signal(range(S + 1), name=f"count_{b}") for b in range(B)]
        lbase = [Signal(range(cfg.layers * D), name=f"lbase_{b}") for b in range(B)]  # layer * D
        full = Signal(B)
        start = Signal()
        cur = Signal(range(B))
        pick = Signal(range(B))
        for b in range(B):
            hits = [self.done[p].valid & (self.done[p].p.tag == b) for p in range(P)]
            inc = sum(hits[1:], hits[0])
            count_next = Signal.like(count[b], name=f"count_next_{b}")
            m.d.comb += count_next.eq(count[b])
            with m.If(start & (pick == b)):
                m.d.comb += count_next.eq(0)
            with m.Elif(Cat(*hits).any()):
                m.d.comb += count_next.eq(count[b] + inc)
            m.d.sync += [count[b].eq(count_next), full[b].eq(count_next == S)]
            for p in range(P):
                with m.If(hits[p]):
                    m.d.sync += lbase[b].eq(mul_const(self.done[p].p.layer, D))

        # --- one row at a time ----------------------------------------------------------------
        busy = Signal()
        ob = Signal(range(D))
        issuing = Signal()
        for b in reversed(range(B)):
            with m.If(full[b]):
                m.d.comb += pick.eq(b)
        # The accumulator and table addresses are counters of their own (no adder before the reads).
        acc_addr = Signal.like(self.acc_addr)
        t_addr = Signal(range(cfg.layers * D))
        m.d.comb += start.eq(~busy & ~self.o.valid & full.any())
        with m.If(start):
            m.d.sync += [busy.eq(1), issuing.eq(1), cur.eq(pick), ob.eq(0)]
            with m.Switch(pick):
                for b in range(B):
                    with m.Case(b):
                        m.d.sync += [acc_addr.eq(b * D), t_addr.eq(lbase[b])]
        with m.If(issuing):
            m.d.sync += [ob.eq(ob + 1), acc_addr.eq(acc_addr + 1), t_addr.eq(t_addr + 1)]
            with m.If(ob == D - 1):
                m.d.sync += issuing.eq(0)
        m.d.comb += self.acc_addr.eq(acc_addr)

        # The table in distributed RAM (asynchronous read of a registered address, then a register):
        # writes are registered once on the way in (they only happen while loading). One memory per
        # output column, each with copies of its own of the write and read addresses, so that no
        # address register drives every column's distributed RAM.
        depth = cfg.layers * D
        tw_en = Signal(O)
        tw_data = Signal(h_params_layout(), reset_less=True)
        m.d.sync += tw_data.eq(self.rq.p.p)
        tw_addrs = word_copies(m, platform, (mul_const(self.rq.p.layer, D) + self.rq.p.ob)[:len(t_addr)],
                               O, "tw_addr")
        t_addr1s = word_copies(m, platform, t_addr, O, "t_addr1")
        params = Signal(data.ArrayLayout(h_params_layout(), O), reset_less=True)
        for n in range(O):
            m.d.sync += tw_en[n].eq(self.rq.valid & (self.rq.p.n == n))
            m.submodules[f"table_{n}"] = table = memory.Memory(shape=h_params_layout(), depth=depth, init=[])
            tw = table.write_port()
            tr = table.read_port(domain="comb")
            m.d.comb += [tw.addr.eq(tw_addrs[n]), tw.data.eq(tw_data), tw.en.eq(tw_en[n]),
                         tr.addr.eq(t_addr1s[n])]
            m.d.sync += params[n].eq(tr.data)

        # Stage t + 1: the cores' blocks and the table's address; t + 2: their sum and the parameters.
        v1, v2 = Signal(), Signal()
        ob1, ob2 = Signal.like(ob), Signal.like(ob)
        m.d.sync += [v1.eq(issuing), ob1.eq(ob), v2.eq(v1), ob2.eq(ob1)]
        total = Signal(data.ArrayLayout(signed(cfg.row_sum_bits), O), reset_less=True)
        for n in range(O):
            parts = [Mux(self.acc_touched[p], self.acc_data[p][n], 0) for p in range(P)]
            m.d.sync += total[n].eq(sum(parts[1:], parts[0]))
        lane_tag = data.StructLayout({"ob": len(ob), "last": 1})
        lanes = []
        for n in range(O):
            lane = RequantLane(cfg.row_sum_bits, lane_tag.size if n == 0 else 0)
            m.submodules[f"rq_{n}"] = lane
            m.d.comb += [lane.i.valid.eq(v2), lane.i.p.acc.eq(total[n]), lane.i.p.mult.eq(params[n].mult),
                         lane.i.p.shift.eq(params[n].shift)]
            lanes.append(lane)
        t_in = Signal(lane_tag)
        m.d.comb += [t_in.ob.eq(ob2), t_in.last.eq(ob2 == D - 1), lanes[0].i.p.tag.eq(t_in)]
        t_out = Signal(lane_tag)
        m.d.comb += t_out.eq(lanes[0].o.p.tag)

        # --- the output row ---------------------------------------------------------------------
        with m.If(lanes[0].o.valid):
            with m.Switch(t_out.ob):
                for b in range(D):
                    with m.Case(b):
                        for n in range(O):
                            m.d.sync += self.o.p.y[b * O + n].eq(lanes[n].o.p.y)
            with m.If(t_out.last):
                m.d.sync += [self.o.valid.eq(1), self.o.p.tag.eq(cur), busy.eq(0)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
