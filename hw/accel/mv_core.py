"""One MLP core: a weight-resident matrix-vector unit that runs hidden chunks as GU and D passes."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.layouts import h_params_layout, job_layout, lut_address, lut_load_layout
from hw.accel.mv_layout import pass_lengths
from hw.lib.bram import Bram, widest_data_width
from hw.lib.ff_copies import ff_copies, word_copies
from hw.lib.mult18 import Mult18, is_ecp5
from hw.lib.mv_unit import MvUnit
from hw.lib.requant_lane import MUX2_INIT, RequantLane
from hw.lib.widths import index_bits, mul_const
from sw.config import AccelConfig
from sw.spec import quant

__all__ = ["MvCore", "done_layout", "gu_rq_load_layout", "gu_table_depth", "mv_acc_bits",
           "silu_table_address", "silu_table_depth"]

NONE, GU, DN = 0, 1, 2
#: Bytes of an x register per copy of its enable (:func:`hw.lib.ff_copies.ff_copies`).
X_GROUP = 8
#: Activation blocks per first-stage multiplexer group (see ``act`` in :meth:`MvCore.elaborate`).
ACT_GROUP_BITS = 2


def gu_rq_load_layout(cfg: AccelConfig):
    """One write of the gate/up requantisation table (entry from
    :func:`hw.accel.mv_layout.gu_table_index`)."""
    return data.StructLayout({"addr": index_bits(2 * cfg.layers * cfg.d_ff),
                              "p": h_params_layout()})


def done_layout(cfg: AccelConfig, tag_bits: int):
    """A finished D pass: the row (``tag``) and layer whose accumulator it completed."""
    return data.StructLayout({"tag": tag_bits, "layer": index_bits(cfg.layers)})


def gu_table_depth(cfg: AccelConfig) -> int:
    """Entries of the gate/up requantisation table: a ``(mult, shift)`` per matrix, layer and
    hidden channel."""
    return 2 * cfg.layers * cfg.d_ff


def silu_table_depth(cfg: AccelConfig) -> int:
    """Entries of the SiLU table: 256 codes per layer."""
    return cfg.layers * 256


def silu_table_address(p):
    """The SiLU table's address of a :func:`hw.accel.layouts.lut_load_layout` write: its ``addr``
    (the code + 128) below its ``layer``."""
    return Cat(p.addr, p.layer)


def bram_table(m, name, width, depth):
    """A ``width``-bit, ``depth``-word table of :class:`hw.lib.bram.Bram` blocks side by side (one
    DP16KD each, output register used: read latency 2). Returns ``(w_en, w_addr, w_data, r_addr,
    r_data)``."""
    dw = widest_data_width(depth)
    if dw is None:
        raise ValueError(f"{name}: a table of {depth} words does not fit one DP16KD deep, "
                         f"not depth {depth!r}")
    abits = index_bits(depth)
    w_en, w_addr, r_addr = Signal(name=f"{name}_w_en"), Signal(abits, name=f"{name}_w_addr"), \
        Signal(abits, name=f"{name}_r_addr")
    w_data, r_data = Signal(width, name=f"{name}_w_data"), Signal(width, name=f"{name}_r_data")
    for k, lo in enumerate(range(0, width, dw)):
        hi = min(width, lo + dw)
        ram = Bram(hi - lo, depth)
        m.submodules[f"{name}_{k}"] = ram
        m.d.comb += [ram.w_en.eq(w_en), ram.w_addr.eq(w_addr), ram.w_data.eq(w_data[lo:hi]),
                     ram.r_addr.eq(r_addr), r_data[lo:hi].eq(ram.r_data)]
    return w_en, w_addr, w_data, r_addr, r_data


def bit_select_primitive(m, name, bits, sel):
    """``bits.bit_select(sel, 1)`` (0 beyond the last bit) as a tree of ECP5 multiplexers: per
    four select bits, from the lowest, 16:1 multiplexers that each fill one PLC (eight LUT4 2:1
    multiplexers, then ``PFUMX``, then two levels of ``L6MUX21``), so that the path from ``sel``
    is four cells inside a PLC per level instead of the deeper LUT4 trees ABC makes of a wide
    ``$shiftx``."""
    cur = [bits[i] for i in range(len(bits))]
    sel = Value.cast(sel)
    cells = []

    def cell(kind, **ports):
        z = Signal(name=f"{name}_{len(cells)}")
        params = {"p_INIT": Const(MUX2_INIT, 16)} if kind == "LUT4" else {}
        cells.append(Instance(kind, **params, o_Z=z, **{f"i_{k}": v for k, v in ports.items()}))
        m.submodules[f"{name}_c{len(cells) - 1}"] = cells[-1]
        return z

    lo = 0
    while len(cur) > 1 and lo < len(sel):
        k = min(4, len(sel) - lo)
        s = [sel[lo + j] for j in range(k)]
        nxt = []
        for g in range(0, len(cur), 1 << k):
            d = cur[g:g + (1 << k)]
            d += [Const(0)] * ((1 << k) - len(d))
            # Level 0: LUT4 2:1 multiplexers on s[0]; level 1: PFUMX (Z = C0 ? ALUT : BLUT) on
            # s[1]; levels 2 and 3: L6MUX21 (Z = SD ? D1 : D0) on s[2] and s[3].
            level = [cell("LUT4", A=d[i], B=d[i + 1], C=s[0], D=Const(0)) for i in range(0, len(d), 2)]
            if k > 1:
                level = [cell("PFUMX", ALUT=level[i + 1], BLUT=level[i], C0=s[1])
                         for i in range(0, len(level), 2)]
            for j in range(2, k):
                level = [cell("L6MUX21", D0=level[i], D1=level[i + 1], SD=s[j])
                         for i in range(0, len(level), 2)]
            nxt.append(level[0])
        cur = nxt
        lo += k
    out = Signal(name=f"{name}_out")
    if lo < len(sel):
        # Select bits above the last level's: the index is past the last bit, 0.
        m.d.comb += out.eq(cur[0] & (sel[lo:] == 0))
    else:
        m.d.comb += out.eq(cur[0])
    return out


def mv_acc_bits(cfg: AccelConfig) -> int:
    """Width of the matrix-vector unit's sums: the longer of a GU run (``d_model`` products) and a
    D run (``d_ff / chunks`` products)."""
    return max(cfg.gu_sum_bits, quant.sum_bits(cfg.chunk_width))


class MvCore(wiring.Component):
    """A v2 MLP core: hidden chunks of the int8 SwiGLU MLP on one :class:`hw.lib.mv_unit.MvUnit`.

    A job is one hidden chunk ``c`` of one row (``x``, ``layer``, ``chunk``, ``tag``); the core
    runs it as two passes over weight blocks read from a :class:`hw.accel.weight_store.WeightStore`
    port, one block per cycle (order and addresses in :mod:`hw.accel.mv_layout`):

    * **GU pass**: gate and up sums of the chunk's ``F`` hidden channels, output block by output
      block. Each block of ``mv_out`` sums is serialised into one :class:`hw.lib.requant_lane.RequantLane`
      (per-channel constants from the core's gate/up table); a gate code goes through the
      layer's SiLU table, an up code is multiplied by the stored SiLU value of its channel and
      requantised by a second lane (the layer's ``mult_h, shift_h``) into ``h``
      (:func:`sw.spec.quant.swiglu_int8`).
    * **D pass**: ``h @ wd[chunk rows]``: each block of ``mv_out`` int32 partial sums is added into
      the row's accumulator (``tag``, output block), kept in the core. The first write of a row
      since ``group_start`` stores instead of adding. When the pass has written its last block,
      ``done`` names the row; the accumulators are read out on ``acc_addr`` /
      ``acc_data`` (one cycle) by whoever adds the cores' parts and requantises the row.

    Schedule: passes issue back to back with no bubble. At the end of a pass, with ``q`` chunks
    whose GU pass is done and whose D pass is not: ``q == 2``: the older one's D pass; ``q == 1``:
    a new job's GU pass if one is held, else that chunk's D pass once its ``h`` is complete;
    ``q == 0``: a new job's GU pass. So a core interleaves ``GU(k0) GU(k1) D(k0) GU(k2) D(k1) ...
    D(kn)``: the D pass of a chunk waits for its ``h`` (the requantisers' latency) only at the end.
    Two ``h`` buffers alternate between consecutive GU passes. The core holds one job ahead
    (``i.ready`` is a register), so the dispatcher hands out the next chunk while a pass runs.

    Parameters
    ----------
    cfg : AccelConfig
        Sizes (``d_model``, ``d_ff``, ``layers``, ``chunks``, ``batch``, ``mv_in``, ``mv_out``).
    w_latency : int
        Cycles from ``w_addr`` to ``w_data`` (the weight store's read latency, at least 1).
    tag_bits : int
        Width of a job's ``tag`` (the row within the group).
    shared_tables : bool
        ``False`` (default): the core holds its gate/up requantisation table and SiLU table and
        takes their writes on ``rq`` and ``lut``. ``True``: the tables live outside (one
        :class:`hw.lib.shared_table.SharedTable` each for two cores) and the core has read ports
        instead of ``rq`` and ``lut``: ``rq_ra`` / ``rq_rd`` and ``lu_ra`` / ``lu_rd``, read
        latency 2 as for its own tables.

    Members
    -------
    i : In(stream.Signature(hw.accel.layouts.job_layout(...)))
        Jobs.
    w_addr : Out(range(cfg.mv_weight_blocks))
    w_data : In(ArrayLayout(signed(8), mv_in * mv_out))
        A weight-store read port.
    rq : In(stream.Signature(gu_rq_load_layout(cfg), always_ready=True))
        Gate/up requantisation table writes.
    lut : In(stream.Signature(lut_load_layout(layers), always_ready=True))
        SiLU table writes.
    h : In(ArrayLayout(h_params_layout(), layers))
        ``mult_h, shift_h`` per layer.
    group_start : In(1)
        A new group begins: every row accumulator is empty again.
    done : Out(stream.Signature(done_layout(cfg, tag_bits), always_ready=True))
    acc_addr : In(range(batch * d_model / mv_out))
        Accumulator read: row ``tag`` output block ``ob`` at ``tag * (d_model / mv_out) + ob``.
    acc_data : Out(ArrayLayout(signed(cfg.row_sum_bits), mv_out))
    acc_touched : Out(1)
        One cycle after ``acc_addr``: the block's sums, and whether any D pass wrote it since
        ``group_start`` (if not, the core's part is zero).
    busy : Out(1)
        A job is held, a pass is running or a chunk waits for its D pass.
    """

    def __init__(self, cfg: AccelConfig, *, w_latency: int, tag_bits: int, shared_tables: bool = False):
        if shared_tables not in (False, True):
            raise TypeError(f"MvCore shared_tables must be a bool, not {shared_tables!r}")
        if not isinstance(w_latency, int) or w_latency < 3:
            raise ValueError(f"MvCore w_latency must be an integer >= 3, not {w_latency!r}")
        # AccelConfig refuses a D pass shorter than ACC_WRITE_DISTANCE and a GU run shorter than
        # mv_out (the schedule's two rules; tests/sw/test_config.py).
        L = pass_lengths(cfg)
        self._cfg, self._wl, self._tag_bits = cfg, w_latency, tag_bits
        self._L, self._shared = L, shared_tables
        W = cfg.mv_in * cfg.mv_out
        if shared_tables:
            tables = {"rq_ra": Out(index_bits(gu_table_depth(cfg))), "rq_rd": In(h_params_layout().size),
                      "lu_ra": Out(index_bits(silu_table_depth(cfg))), "lu_rd": In(8)}
        else:
            tables = {"rq": In(stream.Signature(gu_rq_load_layout(cfg), always_ready=True)),
                      "lut": In(stream.Signature(lut_load_layout(cfg.layers), always_ready=True))}
        super().__init__({
            "i": In(stream.Signature(job_layout(cfg.d_model, cfg.layers, cfg.chunks, tag_bits))),
            "w_addr": Out(range(cfg.mv_weight_blocks)),
            "w_data": In(data.ArrayLayout(signed(8), W)),
            **tables,
            "h": In(data.ArrayLayout(h_params_layout(), cfg.layers)),
            "group_start": In(1),
            "done": Out(stream.Signature(done_layout(cfg, tag_bits), always_ready=True)),
            "acc_addr": In(range(cfg.batch * L["d_ob"])),
            "acc_data": Out(data.ArrayLayout(signed(cfg.row_sum_bits), cfg.mv_out)),
            "acc_touched": Out(1),
            "busy": Out(1),
        })

    @property
    def cfg(self) -> AccelConfig:
        return self._cfg

    def elaborate(self, platform):
        m = Module()
        cfg, L, tb = self._cfg, self._L, self._tag_bits
        I, O = cfg.mv_in, cfg.mv_out
        F = cfg.chunk_width
        gu_blocks, d_blocks = cfg.mv_blocks_per_chunk
        layer_bits, chunk_bits = index_bits(cfg.layers), index_bits(cfg.chunks)
        ob_bits = index_bits(max(L["gu_ob"], L["d_ob"]))
        ib_bits = index_bits(max(L["gu_ib"], L["d_ib"]))
        addr_w = len(self.w_addr)

        # --- the job held ahead, and the two x registers ----------------------------------------
        # x of a job is written once, when it is taken, into the x register the running GU pass
        # does not read; everything else about a job is a few bits and moves freely.
        meta = data.StructLayout({"layer": layer_bits, "chunk": chunk_bits, "tag": max(1, tb),
                                  "base": addr_w, "dbase": addr_w, "slot": 1, "xe": 1})
        xregs = [Signal(data.ArrayLayout(signed(8), cfg.d_model), name=f"x_{e}", reset_less=True)
                 for e in range(2)]
        nxt = Signal(meta)
        nxt_full = Signal()
        gu = Signal(meta)                       # the GU pass running (or last run)
        dq = [Signal(meta, name=f"dq_{e}") for e in range(2)]    # chunks waiting for their D pass
        dq_n = Signal(range(3))
        dcur = Signal(meta)                     # the D pass running
        wslot = Signal()                        # h buffer of the next GU pass
        hready = Signal(2)                      # h buffer complete
        # The next values (``*_n``) of the registers that the pass starts are decided from: each
        # register takes its next value every cycle, and the start conditions of the next cycle are
        # computed from them (below).
        nxt_full_n = Signal()
        hready_n = Signal(2)
        m.d.comb += [nxt_full_n.eq(nxt_full), hready_n.eq(hready)]
        m.d.sync += [nxt_full.eq(nxt_full_n), hready.eq(hready_n)]
        m.d.comb += self.i.ready.eq(~nxt_full)
        take = self.i.valid & self.i.ready
        with m.If(take):
            base = mul_const(mul_const(self.i.p.layer, cfg.chunks) + self.i.p.chunk, gu_blocks + d_blocks)
            m.d.sync += [nxt.layer.eq(self.i.p.layer), nxt.chunk.eq(self.i.p.chunk),
                         nxt.tag.eq(self.i.p.tag), nxt.base.eq(base), nxt.xe.eq(~gu.xe)]
            m.d.comb += nxt_full_n.eq(1)

        # --- the pass counters: their values are this cycle's issue -----------------------------
        kind = Signal(2)
        ob = Signal(ob_bits)
        mat = Signal()
        ib = Signal(ib_bits)
        left = Signal(range(max(gu_blocks, d_blocks)))
        waddr = Signal(addr_w)
        # Registers of the scheduler's conditions, kept equal to their definitions by the next-state
        # assignments (to their ``*_n``) here and at the pass starts below: ``end`` = a pass's last
        # issue (``left == 0``), ``decide`` = ``kind == NONE | end``, ``push`` = ``end & kind == GU``;
        # ``start_gu`` and ``start_d`` below likewise.
        end, end_n = Signal(), Signal()
        decide, decide_n = Signal(init=1), Signal()
        push, push_n = Signal(), Signal()
        m.d.comb += [end_n.eq(end), decide_n.eq(decide), push_n.eq(push)]
        m.d.sync += [end.eq(end_n), decide.eq(decide_n), push.eq(push_n)]
        m.d.comb += self.w_addr.eq(waddr)
        with m.If(kind != NONE):
            m.d.sync += [left.eq(left - 1), waddr.eq(waddr + 1)]
            m.d.comb += [end_n.eq(left == 1), decide_n.eq(left == 1), push_n.eq((left == 1) & (kind == GU))]
            with m.If(kind == GU):
                with m.If(ib == L["gu_ib"] - 1):
                    m.d.sync += [ib.eq(0), mat.eq(~mat)]
                    with m.If(mat):
                        m.d.sync += ob.eq(ob + 1)
                with m.Else():
                    m.d.sync += ib.eq(ib + 1)
            with m.Else():
                with m.If(ib == L["d_ib"] - 1):
                    m.d.sync += [ib.eq(0), ob.eq(ob + 1)]
                with m.Else():
                    m.d.sync += ib.eq(ib + 1)

        # --- what runs next (decided in a pass's last cycle, or while idle) ---------------------
        # A chunk joins the queue when its GU pass ends (push) and leaves it when its D pass starts.
        def starts(decide, q_after, nxt_full, oldest_ready):
            """The pass starts by the rule of the class docstring, ``(start_gu, start_d)``, from the
            queue length after the push (``q_after``) and whether its oldest chunk's h is complete."""
            return (decide & (q_after != 2) & nxt_full,
                    decide & oldest_ready & ((q_after == 2) | ((q_after == 1) & ~nxt_full)))

        q_after = Signal(range(3))
        m.d.comb += q_after.eq(dq_n + push)
        new_q = [Signal(meta, name=f"new_q_{e}") for e in range(2)]
        m.d.comb += [new_q[0].eq(dq[0]), new_q[1].eq(dq[1])]
        with m.If(push):
            with m.If(dq_n == 0):
                m.d.comb += new_q[0].eq(gu)
            with m.Else():
                m.d.comb += new_q[1].eq(gu)
        # start_gu and start_d are registers, kept equal to starts(decide, q_after, nxt_full,
        # hready[new_q[0].slot]) of this cycle: they take starts() of the next values (below), so the
        # wide enables of a pass start come from two flops. Their reset value 0 is starts() of the
        # reset state (decide, an empty queue, no job held).
        start_gu = Signal()
        start_d = Signal()
        dq_n_n = Signal.like(dq_n)
        m.d.comb += dq_n_n.eq(q_after)
        m.d.sync += dq_n.eq(dq_n_n)
        with m.If(start_d):
            # The D pass takes the oldest, which is new_q[0].
            m.d.sync += [dq[0].eq(new_q[1]), dcur.eq(new_q[0])]
            m.d.comb += dq_n_n.eq(q_after - 1)
        with m.Else():
            m.d.sync += [dq[0].eq(new_q[0]), dq[1].eq(new_q[1])]

        with m.If(start_gu):
            m.d.sync += [gu.eq(nxt), gu.slot.eq(wslot), gu.dbase.eq(nxt.base + gu_blocks), wslot.eq(~wslot),
                         kind.eq(GU), ob.eq(0), mat.eq(0), ib.eq(0), left.eq(gu_blocks - 1),
                         waddr.eq(nxt.base)]
            m.d.comb += [nxt_full_n.eq(0), hready_n.bit_select(wslot, 1).eq(0),
                         end_n.eq(gu_blocks == 1), decide_n.eq(gu_blocks == 1), push_n.eq(gu_blocks == 1)]
        with m.Elif(start_d):
            m.d.sync += [kind.eq(DN), ob.eq(0), ib.eq(0), left.eq(d_blocks - 1), waddr.eq(new_q[0].dbase)]
            m.d.comb += [end_n.eq(d_blocks == 1), decide_n.eq(d_blocks == 1), push_n.eq(0)]
        with m.Elif(end):
            m.d.sync += kind.eq(NONE)
            m.d.comb += [end_n.eq(0), decide_n.eq(1), push_n.eq(0)]
        # The next cycle's q_after and new_q[0].slot, from the next values of dq_n, push, gu.slot
        # and dq[0].slot.
        q_after_n = Signal(range(3))
        m.d.comb += q_after_n.eq(dq_n_n + push_n)
        oldest_slot_n = Mux(push_n & (dq_n_n == 0), Mux(start_gu, wslot, gu.slot),
                            Mux(start_d, new_q[1].slot, new_q[0].slot))
        start_gu_n, start_d_n = starts(decide_n, q_after_n, nxt_full_n, hready_n.bit_select(oldest_slot_n, 1))
        m.d.sync += [start_gu.eq(start_gu_n), start_d.eq(start_d_n)]

        # The free x register follows the input's payload until a job is held, so its 8 * d_model
        # enables come from flops and not from the handshake: ``~nxt_full & (gu.xe != e)``,
        # registered from its next value in copies, one per group of X_GROUP bytes.
        gu_xe_n = Mux(start_gu, nxt.xe, gu.xe)
        groups = -(-cfg.d_model // X_GROUP)
        for e in range(2):
            ens = ff_copies(m, platform, ~nxt_full_n & (gu_xe_n != e), groups, f"x_en_{e}", init=e)
            for g, en in enumerate(ens):
                lo, hi = g * X_GROUP, min(cfg.d_model, (g + 1) * X_GROUP)
                with m.If(en):
                    m.d.sync += [xregs[e][j].eq(self.i.p.x[j]) for j in range(lo, hi)]
        m.d.comb += self.busy.eq((kind != NONE) | (dq_n != 0) | nxt_full)

        # --- operands: the activation block of this issue, delayed to meet the weights ----------
        hbuf = [Signal(data.ArrayLayout(signed(8), F), name=f"h_{s}", reset_less=True) for s in range(2)]
        # In three registered stages: per group of 2**ACT_GROUP_BITS blocks of a source, a one-hot
        # selection registered on its own (act_hit_*: which block of which x register or h buffer,
        # none when this issue reads another group or source), so that each select bit drives one
        # LUT per bit of its group; the selected block, or 0 (act_pre_*); the OR of the groups. The
        # weights come w_latency cycles after the issue, so this costs no cycle. Only the beats of a
        # pass reach the unit's sums (MvUnit adds valid beats only), so what act holds between passes
        # does not matter. The registers are read one cycle after the issue: a job's x is written
        # into the free x register from the cycle after its GU pass starts on the other one (visible
        # one more cycle later), and an h buffer is rewritten only by the GU pass after next, long
        # after the D pass that reads it.
        lo_bits = min(ACT_GROUP_BITS, ib_bits)
        act_block = data.ArrayLayout(signed(8), I)
        act_or = Const(0, act_block.size)
        for src, n_blocks, which, regs in ((GU, L["gu_ib"], gu.xe, xregs), (DN, L["d_ib"], dcur.slot, hbuf)):
            name = "gu" if src == GU else "d"
            for g in range(-(-n_blocks // (1 << lo_bits))):
                blocks = [(e, b) for e in range(2)
                          for b in range(g << lo_bits, min(n_blocks, (g + 1) << lo_bits))]
                hit = Signal(len(blocks), name=f"act_hit_{name}{g}")
                m.d.sync += hit.eq(Cat((kind == src) & (which == e) & (ib == b) for e, b in blocks))
                pre = Signal(act_block, name=f"act_pre_{name}{g}", reset_less=True)
                sel = Const(0, act_block.size)
                for k, (e, b) in enumerate(blocks):
                    sel = sel | (regs[e].as_value()[b * I * 8:(b + 1) * I * 8] & hit[k].replicate(I * 8))
                m.d.sync += pre.eq(sel)
                act_or = act_or | pre.as_value()
        act = Signal(act_block, reset_less=True)
        m.d.sync += act.eq(act_or)
        # The pass descriptor rides along: at a run's last beat it says where the sums go.
        desc_layout = data.StructLayout({"valid": 1, "first": 1, "last": 1, "kind": 2, "mat": 1,
                                         "ob": ob_bits, "layer": layer_bits, "chunk": chunk_bits,
                                         "slot": 1, "tag": max(1, tb)})
        desc = Signal(desc_layout)
        cur = Signal(meta)
        m.d.comb += cur.eq(Mux(kind == GU, gu, dcur))
        m.d.sync += [desc.valid.eq(kind != NONE), desc.kind.eq(kind), desc.mat.eq(mat), desc.ob.eq(ob),
                     desc.first.eq(ib == 0),
                     desc.last.eq(Mux(kind == GU, ib == L["gu_ib"] - 1, ib == L["d_ib"] - 1)),
                     desc.layer.eq(cur.layer), desc.chunk.eq(cur.chunk), desc.slot.eq(cur.slot),
                     desc.tag.eq(cur.tag)]
        # act is three cycles after the issue, desc one; the weights w_latency cycles after it.
        for s in range(self._wl - 3):
            a2 = Signal.like(act, name=f"act_d{s}")
            m.d.sync += a2.eq(act)
            act = a2
        for s in range(self._wl - 1):
            d2 = Signal.like(desc, name=f"desc_d{s}")
            m.d.sync += d2.eq(desc)
            desc = d2

        m.submodules.mv = mv = MvUnit(I, O, mv_acc_bits(cfg))
        m.d.comb += [mv.i.valid.eq(desc.valid), mv.i.p.x.eq(act), mv.i.p.w.eq(self.w_data),
                     mv.i.p.first.eq(desc.first), mv.i.p.last.eq(desc.last)]
        stages = [desc]
        for s in range(mv.latency):
            d2 = Signal.like(desc, name=f"desc_m{s}")
            m.d.sync += d2.eq(desc)
            desc = d2
            stages.append(desc)
        assert len(stages) >= 4, "MvUnit's latency is at least 3"
        desc_prev, desc_ppp = stages[-2], stages[-4]
        # The addresses a finished block needs (gate/up table entry, accumulator), computed a
        # cycle ahead beside the descriptor; the accumulator's three cycles ahead (a_e2), then
        # two (a_early) with its one-hot form (a_oh), for the touched bit read a cycle ahead (below).
        n_acc = cfg.batch * L["d_ob"]
        tbase = Signal(index_bits(2 * cfg.layers * cfg.d_ff))
        a_idx = Signal(range(n_acc))
        a_early = Signal.like(a_idx)
        a_e2 = Signal.like(a_idx)
        a_oh = Signal(n_acc)
        m.d.sync += [tbase.eq(mul_const(mul_const(desc_prev.mat, cfg.layers) + desc_prev.layer, cfg.d_ff)
                              + mul_const(desc_prev.chunk, F) + mul_const(desc_prev.ob, O)),
                     a_e2.eq(mul_const(desc_ppp.tag, L["d_ob"]) + desc_ppp.ob), a_early.eq(a_e2),
                     a_idx.eq(a_early)]
        for k in range(n_acc):
            m.d.sync += a_oh[k].eq(a_e2 == k)
        out_gu = mv.o.valid & (desc.kind == GU)
        out_d = mv.o.valid & (desc.kind == DN)

        # --- GU sums -> one requantiser lane -> SiLU or the gated product -> h -----------------
        # The table in block RAM with its output register: the first entry of a block is addressed
        # in the cycle the sums arrive, the others from ser_addr, so each reaches the lane with its sum.
        if self._shared:
            rq_ra, rq_rd = self.rq_ra, self.rq_rd
        else:
            rq_we, rq_wa, rq_wd, rq_ra, rq_rd = bram_table(m, "rq_table", h_params_layout().size,
                                                           gu_table_depth(cfg))
            m.d.comb += [rq_we.eq(self.rq.valid), rq_wa.eq(self.rq.p.addr), rq_wd.eq(self.rq.p.p)]
        rq_p = Signal(h_params_layout())
        m.d.comb += rq_p.eq(rq_rd)
        ser = Signal(data.ArrayLayout(signed(mv.acc_bits), O), reset_less=True)
        ser_busy = Signal()
        ser_n = Signal(range(O))
        ser_tag = Signal(data.StructLayout({"mat": 1, "ob": ob_bits, "n": index_bits(O), "slot": 1,
                                            "layer": layer_bits}))
        ser_addr = Signal(len(tbase))
        with m.If(out_gu):
            m.d.sync += [ser.eq(mv.o.p), ser_busy.eq(1), ser_n.eq(0), ser_addr.eq(tbase + 1),
                         ser_tag.mat.eq(desc.mat), ser_tag.ob.eq(desc.ob), ser_tag.slot.eq(desc.slot),
                         ser_tag.layer.eq(desc.layer)]
        with m.Elif(ser_busy):
            m.d.sync += [ser_n.eq(ser_n + 1), ser_addr.eq(ser_addr + 1)]
            with m.If(ser_n == O - 1):
                m.d.sync += ser_busy.eq(0)
        m.d.comb += rq_ra.eq(Mux(out_gu, tbase, ser_addr))
        lane_v = Signal()
        lane_acc = Signal(signed(mv.acc_bits), reset_less=True)
        lane_tag = Signal.like(ser_tag)
        m.d.sync += [lane_v.eq(ser_busy), lane_acc.eq(ser[ser_n]), lane_tag.eq(ser_tag),
                     lane_tag.n.eq(ser_n)]
        m.submodules.rq_gu = rq_gu = RequantLane(mv.acc_bits, len(ser_tag.as_value()))
        m.d.comb += [rq_gu.i.valid.eq(lane_v), rq_gu.i.p.acc.eq(lane_acc), rq_gu.i.p.mult.eq(rq_p.mult),
                     rq_gu.i.p.shift.eq(rq_p.shift), rq_gu.i.p.tag.eq(lane_tag)]
        code = rq_gu.o.p.y
        ctag = Signal.like(ser_tag)
        m.d.comb += ctag.eq(rq_gu.o.p.tag)

        # SiLU of gate codes: the layer's table (block RAM, read latency 2), stored per channel of
        # the block. The up code of the channel comes a run (d_model / mv_in cycles) later.
        if self._shared:
            lu_ra, lu_rd = self.lu_ra, self.lu_rd
        else:
            lu_we, lu_wa, lu_wd, lu_ra, lu_rd = bram_table(m, "silu", 8, silu_table_depth(cfg))
            m.d.comb += [lu_we.eq(self.lut.valid), lu_wa.eq(silu_table_address(self.lut.p)),
                         lu_wd.eq(self.lut.p.value)]
        m.d.comb += lu_ra.eq(Cat(lut_address(code), ctag.layer))
        g_v = Signal(2)
        g_n = [Signal.like(ctag.n, name=f"g_n_{s}") for s in range(2)]
        m.d.sync += [g_v.eq(Cat(rq_gu.o.valid & ~ctag.mat, g_v[0])), g_n[0].eq(ctag.n), g_n[1].eq(g_n[0])]
        acts = Signal(data.ArrayLayout(signed(8), O), reset_less=True)
        with m.If(g_v[1]):
            m.d.sync += acts[g_n[1]].eq(lu_rd)
        # Up codes: act * up in a DSP, then the layer's h requantisation.
        m.submodules.gate_mul = gmul = Mult18(8, 8)
        m.d.comb += [gmul.a.eq(acts[ctag.n]), gmul.b.eq(code)]
        up_v = Signal(Mult18.latency)
        up_tag = [Signal.like(ctag, name=f"up_tag_{s}") for s in range(Mult18.latency)]
        m.d.sync += [up_v.eq(Cat(rq_gu.o.valid & ctag.mat, up_v[:-1])), up_tag[0].eq(ctag)]
        for s in range(1, Mult18.latency):
            m.d.sync += up_tag[s].eq(up_tag[s - 1])
        hp = Signal(h_params_layout())
        m.d.comb += hp.eq(self.h[up_tag[-1].layer])
        m.submodules.rq_h = rq_h = RequantLane(len(gmul.p), len(ctag.as_value()))
        m.d.comb += [rq_h.i.valid.eq(up_v[-1]), rq_h.i.p.acc.eq(gmul.p), rq_h.i.p.mult.eq(hp.mult),
                     rq_h.i.p.shift.eq(hp.shift), rq_h.i.p.tag.eq(up_tag[-1])]
        htag = Signal.like(ctag)
        m.d.comb += htag.eq(rq_h.o.p.tag)
        with m.If(rq_h.o.valid):
            for s in range(2):
                with m.If(htag.slot == s):
                    with m.Switch(Cat(htag.n, htag.ob)):
                        for b in range(L["gu_ob"]):
                            for n in range(O):
                                with m.Case(n | (b << index_bits(O))):
                                    m.d.sync += hbuf[s][b * O + n].eq(rq_h.o.p.y)
            with m.If((htag.ob == L["gu_ob"] - 1) & (htag.n == O - 1)):
                m.d.comb += hready_n.bit_select(htag.slot, 1).eq(1)

        # --- D sums -> the row accumulators -------------------------------------------------------
        R = cfg.row_sum_bits
        # One memory per output column, each with copies of its own of the read and write
        # addresses and the write enable (:func:`hw.lib.ff_copies.word_copies`): an address that
        # reaches every distributed-RAM cell of all columns is one net across the core.
        accs = []
        for n in range(O):
            mem = memory.Memory(shape=signed(R), depth=n_acc, init=[])
            m.submodules[f"acc_{n}"] = mem
            accs.append((mem.write_port(), mem.read_port(domain="comb"), mem.read_port(domain="comb")))
        touched = Signal(n_acc)
        r_v, r_last, r_touched, t_pre = Signal(), Signal(), Signal(), Signal()
        r_idx = Signal(range(n_acc))
        r_old = Signal(data.ArrayLayout(signed(R), O), reset_less=True)
        r_sum = Signal(data.ArrayLayout(signed(mv.acc_bits), O), reset_less=True)
        r_tag = Signal(max(1, tb))
        r_layer = Signal(layer_bits)
        ar_idx = word_copies(m, platform, a_early, O, "ar_idx")    # each equals a_idx
        w_idx_c = word_copies(m, platform, r_idx, O, "w_idx")      # each equals w_idx
        w_v_c = ff_copies(m, platform, r_v, O, "w_v")              # each equals w_v
        for n, (_, ar, _) in enumerate(accs):
            m.d.comb += ar.addr.eq(ar_idx[n])
            m.d.sync += r_old[n].eq(ar.data)
        m.d.sync += [r_v.eq(out_d), r_last.eq(desc.ob == L["d_ob"] - 1), r_idx.eq(a_idx),
                     r_touched.eq(t_pre), r_sum.eq(mv.o.p),
                     r_tag.eq(desc.tag), r_layer.eq(desc.layer)]
        # t_pre = touched[a_idx] of the next cycle, read a cycle ahead through the one-hot a_oh
        # (a_idx of the next cycle): the bit as the updates below leave it, cleared by group_start,
        # set by this cycle's r_v at r_idx.
        m.d.sync += t_pre.eq(~self.group_start & ((touched & a_oh).any() | (r_v & (r_idx == a_early))))
        # The new sums are registered before the write (ACC_WRITE_DISTANCE).
        w_data = Signal.like(r_old, reset_less=True)
        for n, (aw, _, _) in enumerate(accs):
            m.d.sync += w_data[n].eq(Mux(r_touched, r_old[n] + r_sum[n], r_sum[n]))
            m.d.comb += [aw.en.eq(w_v_c[n]), aw.addr.eq(w_idx_c[n]), aw.data.eq(w_data[n])]
        with m.If(self.group_start):
            m.d.sync += touched.eq(0)
        with m.Elif(r_v):
            m.d.sync += touched.bit_select(r_idx, 1).eq(1)
        m.d.sync += [self.done.valid.eq(r_v & r_last), self.done.p.tag.eq(r_tag),
                     self.done.p.layer.eq(r_layer)]
        acc_q = Signal.like(r_old, reset_less=True)
        for n, (_, _, ao) in enumerate(accs):
            m.d.sync += acc_q[n].eq(ao.data)
            m.d.comb += ao.addr.eq(self.acc_addr)
        m.d.comb += self.acc_data.eq(acc_q)
        # On the ECP5 the touched bit of acc_addr is read by PLC-sized multiplexers (acc_addr arrives
        # late: it also addresses every distributed RAM cell of the accumulators).
        if is_ecp5(platform):
            m.d.sync += self.acc_touched.eq(
                bit_select_primitive(m, "acc_touched_sel", touched, self.acc_addr))
        else:
            m.d.sync += self.acc_touched.eq(touched.bit_select(self.acc_addr, 1))
        return m
