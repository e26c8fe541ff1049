"""The FastCar accelerator: the TAS of a group's rows in parallel, replay cache, the matrix-vector
MLP datapath, in-order output."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.layouts import (
    COUNTER_BITS,
    FRAME_BITS,
    ctrl_layout,
    decided_row_in_layout,
    h_params_layout,
    lut_load_layout,
    out_user_layout,
    row_in_layout,
)
from hw.accel.mlp_engine import MlpEngine
from hw.accel.mv_core import gu_rq_load_layout
from hw.accel.replay_cache import ReplayCache
from hw.accel.row_out import rqd_load_layout
from hw.accel.tas_group import TasGroup, group_decision_layout
from hw.lib.ff_copies import word_copies
from hw.lib.reorder_buffer import ReorderBuffer
from hw.lib.skid import SkidBuffer
from hw.lib.widths import index_bits
from sw.config import AccelConfig

__all__ = ["NEVER_EVENTS", "STARVED_EVENTS", "Accelerator", "Target", "cfg_layout", "coverage_events",
           "same_row_finish_possible", "schedule_counters"]

#: Bytes of a row selected (replay cache or MLP) by one copy of the cache's output valid.
ROB_SELECT_BYTES = 12

#: Counters of :func:`coverage_events` that must stay 0: invariants the design relies on, not
#: events a testbench should reach.
NEVER_EVENTS = ("cov_result_refused",)

#: Counters of :func:`coverage_events` that only a run whose input pauses most of the time reaches
#: (the board's UART: rows arrive far slower than the engine computes).
STARVED_EVENTS = ("cov_drained_mid_group",)


def same_row_finish_possible(cfg: AccelConfig) -> bool:
    """Whether two cores can finish D passes of the same row in one cycle: only when a row's chunks
    do not split evenly over two or more cores. With chunks a multiple of the cores, DRS and chunk
    round-robin alternate a row's chunks between the cores one cycle apart, and static keeps a row
    on one core (docs/verification.md)."""
    return cfg.cores > 1 and cfg.chunks % cfg.cores != 0


def coverage_events(cfg: AccelConfig) -> dict[str, str]:
    """The coverage counters of an ``Accelerator(cfg, coverage=True)``, by port name: cycles in which
    each event held, or for ``cov_tas_queue_peak`` the most decisions the TAS group's output queue
    held at once. (That queue has room for every row the TAS can hold in flight, its latency; in the
    accelerator it never holds more than ``batch - 3``: a group has ``batch`` rows, the next group
    waits for the whole group to leave, and of the waiting decisions one is in the dispatcher, one
    in the register slice after the TAS group and one in its output register.)"""
    events = {"cov_finish_together": "two or more cores finished a D pass in the same cycle",
              "cov_tas_queue_peak": "the most decisions in the TAS group's output queue at once",
              "cov_tas_queue_empty": "the TAS group's output queue was empty",
              "cov_rob_full": "every reorder-buffer slot held a row",
              "cov_rob_empty": "no reorder-buffer slot held a row",
              "cov_result_refused": "a result reached the reorder buffer while its slot was full "
                                    "(it would be lost; must stay 0)",
              "cov_drained_mid_group": "every row taken of the group had left on y, and its last row "
                                       "had not arrived"}
    if same_row_finish_possible(cfg):
        events["cov_finish_same_row"] = "two cores finished D passes of the same row in the same cycle"
    for p in range(cfg.cores):
        events[f"cov_job_held_{p}"] = f"core {p}'s job slot was full (no job taken from the dispatcher)"
        events[f"cov_job_free_{p}"] = f"core {p}'s job slot was empty"
    return events


def schedule_counters(cfg: AccelConfig) -> dict[str, str]:
    """The job counters of an ``Accelerator(cfg, coverage=True)``, by port name, counted only while
    the schedule is static or chunk round-robin: from them a testbench checks that each core got the
    rows (static: row ``b`` on core ``b mod cores``) or chunks (chunk round-robin: chunk ``j`` on
    core ``j mod cores``) the schedule gives it, which outputs and cycles cannot show (the cores
    are interchangeable)."""
    out = {}
    for p in range(cfg.cores):
        out[f"obs_jobs_{p}"] = f"jobs core {p} took under the static or chunk round-robin schedule"
        out[f"obs_key_sum_{p}"] = "the sum of their row * chunks + chunk"
    return out


class Target:
    """``target`` codes of the configuration words."""
    W, RQGU, RQD, LUT, H, CTRL = range(6)


def cfg_layout(cfg: AccelConfig):
    """One configuration word: ``target``, ``addr`` and the target's payload in ``data``.

    - ``W``: weight block ``addr`` (:func:`hw.accel.mv_layout.weight_blocks` order), ``data`` its
      ``mv_out x mv_in`` int8 weights, element ``n * mv_in + k``;
    - ``RQGU``: gate/up table entry ``addr`` (:func:`hw.accel.mv_layout.gu_table_index`), ``data``
      ``h_params_layout`` (mult, shift);
    - ``RQD``: ``data`` a :func:`hw.accel.row_out.rqd_load_layout` word (``addr`` unused);
    - ``LUT``: ``data`` a :func:`hw.accel.layouts.lut_load_layout` word;
    - ``H``: layer ``addr``'s ``mult_h, shift_h``; ``CTRL``: the control word.
    """
    widths = [8 * cfg.mv_in * cfg.mv_out, h_params_layout().size, rqd_load_layout(cfg).size,
              lut_load_layout(cfg.layers).size, ctrl_layout().size]
    addr = max(index_bits(cfg.mv_weight_blocks), gu_rq_load_layout(cfg)["addr"].width)
    return data.StructLayout({"target": 3, "addr": addr, "data": max(widths)})


class Accelerator(wiring.Component):
    """The decode-phase FastCar accelerator, one group (one layer at one decode step) at a time.

    1. Rows arrive on ``x`` (``tlast`` on the group's last row), one per beat. Each goes to its
       engine of the :class:`hw.accel.tas_group.TasGroup` (row ``b`` on engine ``b``, all in parallel);
       its ``x`` is kept in a row buffer.
    2. Decisions leave the TAS in arrival order. A replayed row is read from the
       :class:`hw.accel.replay_cache.ReplayCache`; a computed row goes with its ``x`` to the
       :class:`hw.accel.mlp_engine.MlpEngine` (dispatcher, two matrix-vector cores, output stage), whose
       result is written back to the cache.
    3. A :class:`hw.lib.reorder_buffer.ReorderBuffer` releases the rows in row order on ``y``.

    A new group is accepted once the previous one has left completely (layer ``l + 1`` needs layer
    ``l``'s output).

    With ``decisions="row"`` there is no TAS group: each row arrives with its decision already
    taken (:func:`hw.accel.layouts.decided_row_in_layout`; the whole step takes it from the
    attention's scores, :class:`hw.step.tas_tap.TasTap`), and the decisions wait in a queue of
    ``batch`` entries in the TAS group's place. Everything after it is the same gateware.

    Members
    -------
    cfg : In(stream.Signature({data: cfg_layout(cfg)}))
        Weights, requantisation tables, SiLU tables and the control word.
    x : In(stream.Signature({data: row_in_layout(cfg), last}))
        Row inputs (``decided_row_in_layout(cfg)`` with ``decisions="row"``).
    y : Out(stream.Signature({data: ArrayLayout(signed(8), d_model), user: out_user_layout, last}))
        Row outputs in row order; ``user`` holds the replay bit, the row and its TAS.
    group_cycles, total_cycles, groups, rows_replayed, rows_computed : Out(COUNTER_BITS)
        Cycles of the last group (first row taken to last row given, inclusive), their running
        sum, groups done, and rows by decision.
    core_busy : Out(COUNTER_BITS).array(cores)
        Cycles in which each core held a job, ran a pass or had a chunk waiting for its D pass.
    cov_* : Out(COUNTER_BITS)
        With ``coverage``: cycles of each event of :func:`coverage_events` (for the testbench; the
        bitstream is built without them).
    obs_* : Out(COUNTER_BITS)
        With ``coverage``: the job counters of :func:`schedule_counters`.
    """

    def __init__(self, cfg: AccelConfig, *, coverage: bool = False, decisions: str = "tas"):
        if decisions not in ("tas", "row"):
            raise ValueError(f"Accelerator decisions must be 'tas' or 'row', not {decisions!r}")
        self._cfg, self._coverage, self._decisions = cfg, coverage, decisions
        row_layout = row_in_layout(cfg) if decisions == "tas" else decided_row_in_layout(cfg)
        members = {
            "cfg": In(stream.Signature(data.StructLayout({"data": cfg_layout(cfg)}))),
            "x": In(stream.Signature(data.StructLayout({"data": row_layout, "last": 1}))),
            "y": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(signed(8), cfg.d_model), "user": out_user_layout(cfg), "last": 1}))),
            "core_busy": Out(COUNTER_BITS).array(cfg.cores),
        }
        for name in ("group_cycles", "total_cycles", "groups", "rows_replayed", "rows_computed"):
            members[name] = Out(COUNTER_BITS)
        if coverage:
            for name in (*coverage_events(cfg), *schedule_counters(cfg)):
                members[name] = Out(COUNTER_BITS)
        super().__init__(members)

    @property
    def config(self):
        return self._cfg

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        B, P, d = cfg.batch, cfg.cores, cfg.d_model
        tag_bits = index_bits(B)

        with_tas = self._decisions == "tas"
        if with_tas:
            m.submodules.tas = tas = TasGroup(d, cfg.layers, cfg.tokens_per_frame, B, lanes=cfg.tas_lanes,
                                              frame_bits=FRAME_BITS)
        else:
            m.submodules.decisions = decisions = fifo.SyncFIFOBuffered(width=group_decision_layout(B).size,
                                                                      depth=max(2, B))
        m.submodules.cache = cache = ReplayCache(d, cfg.layers, cfg.tokens_per_frame, B)
        m.submodules.mlp = mlp = MlpEngine(cfg, tag_bits=tag_bits)
        rob_layout = data.StructLayout({"y": data.ArrayLayout(signed(8), d), "replay": 1})
        m.submodules.rob = rob = ReorderBuffer(rob_layout, max(2, B), select_bits=8 * ROB_SELECT_BYTES)

        # --- configuration ---------------------------------------------------------------------
        # Each word is registered, with its target decoded into one valid flop per target, so
        # that the bridge's handshake does not reach the tables' and the weight store's write
        # ports across the die (a cycle of configuration latency; nothing else waits on it).
        m.d.comb += self.cfg.ready.eq(1)
        c = Signal.like(self.cfg.p.data, name="cfg_word", reset_less=True)
        m.d.sync += c.eq(self.cfg.p.data)
        load = {t: Signal(name=f"cfg_load_{n}") for n, t in (("w", Target.W), ("rqgu", Target.RQGU),
                                                            ("rqd", Target.RQD), ("lut", Target.LUT),
                                                            ("h", Target.H), ("ctrl", Target.CTRL))}
        for t, v in load.items():
            m.d.sync += v.eq(self.cfg.valid & (self.cfg.p.data.target == t))
        ctrl = Signal(ctrl_layout())
        h = Signal(data.ArrayLayout(h_params_layout(), cfg.layers))
        m.d.comb += [
            mlp.w.valid.eq(load[Target.W]), mlp.w.p.addr.eq(c.addr), mlp.w.p.data.eq(c.data),
            mlp.rq.valid.eq(load[Target.RQGU]), mlp.rq.p.addr.eq(c.addr),
            mlp.rq.p.p.eq(c.data),
            mlp.rqd.valid.eq(load[Target.RQD]), mlp.rqd.p.eq(c.data),
            mlp.lut.valid.eq(load[Target.LUT]), mlp.lut.p.eq(c.data),
        ]
        with m.If(load[Target.H]):
            m.d.sync += h[c.addr[:index_bits(cfg.layers)]].eq(c.data)
        with m.If(load[Target.CTRL]):
            m.d.sync += ctrl.eq(c.data)
        m.d.comb += [
            mlp.h.eq(h), mlp.static.eq(ctrl.static), mlp.chunk_rr.eq(ctrl.chunk_rr),
        ]
        if with_tas:
            m.d.comb += [
                tas.refresh_en.eq(ctrl.refresh_en), tas.refresh_every.eq(ctrl.refresh_every),
                tas.max_chain_en.eq(ctrl.max_chain_en), tas.max_chain.eq(ctrl.max_chain),
            ]

        # --- rows in: TAS engines and the row buffer -----------------------------------------
        grp_layer = Signal(index_bits(cfg.layers))
        grp_index = Signal(index_bits(cfg.tokens_per_frame))
        rows_in = Signal(range(B + 1))
        rows_out = Signal(range(B + 1))
        last_seen = Signal()
        in_group = Signal()
        r = self.x.p.data
        if with_tas:
            m.d.comb += [
                tas.i.valid.eq(self.x.valid & ~last_seen),
                tas.i.p.q.eq(r.q), tas.i.p.k.eq(r.k), tas.i.p.threshold.eq(r.threshold),
                tas.i.p.layer.eq(r.layer), tas.i.p.frame.eq(r.frame), tas.i.p.index.eq(r.index),
                tas.i.p.row.eq(r.row),
                self.x.ready.eq(tas.i.ready & ~last_seen),
            ]
        else:
            given = Signal(group_decision_layout(B))
            m.d.comb += [
                given.row.eq(r.row), given.tas.eq(r.tas), given.replay.eq(r.replay),
                decisions.w_en.eq(self.x.valid & ~last_seen), decisions.w_data.eq(given),
                self.x.ready.eq(decisions.w_rdy & ~last_seen),
            ]
        took = self.x.valid & self.x.ready
        # The row buffer: each core reads its job's x at the job's tag (asynchronously), so no row
        # register is enabled by the TAS-dispatcher handshake.
        # It is written a cycle after the beat, from registers (the row's x, loaded in every cycle,
        # and the take), so that the handshake does not drive its write enables; a core reads a
        # row's x a TAS latency after its beat at the earliest.
        m.submodules.xbuf = xbuf = memory.Memory(shape=data.ArrayLayout(signed(8), d), depth=B, init=[])
        xw = xbuf.write_port()
        x_r = Signal.like(r.x, name="x_r", reset_less=True)
        x_row = Signal.like(r.row, name="x_row", reset_less=True)
        x_took = Signal(name="x_took")
        m.d.sync += [x_r.eq(r.x), x_row.eq(r.row), x_took.eq(took)]
        m.d.comb += [xw.en.eq(x_took), xw.addr.eq(x_row), xw.data.eq(x_r)]
        for p in range(P):
            xr = xbuf.read_port(domain="comb")
            m.d.comb += [xr.addr.eq(mlp.x_addr[p]), mlp.x_data[p].eq(xr.data)]
        # The cores clear their state for a new group a cycle after its first row is taken (its
        # first job reaches them a TAS latency later), from a register.
        group_start = Signal()
        m.d.sync += group_start.eq(took & ~in_group)
        m.d.comb += mlp.group_start.eq(group_start)
        with m.If(took):
            m.d.sync += [rows_in.eq(rows_in + 1), last_seen.eq(self.x.p.last), in_group.eq(1)]
            with m.If(~in_group):
                m.d.sync += [grp_layer.eq(r.layer), grp_index.eq(r.index)]

        # --- decisions: replayed rows to the cache, computed rows to the MLP -------------------
        # Through a register slice (latency 1; the TAS group's output is not registered): the
        # TAS group's o.ready is a flop, so the dispatcher's and the cache's handshakes do not
        # chain into the TAS, and the decision they read comes from a register beside them.
        m.submodules.tas_out = tas_out = SkidBuffer(group_decision_layout(B), mode="full")
        if with_tas:
            wiring.connect(m, tas.o, tas_out.i)
        else:
            m.d.comb += [tas_out.i.valid.eq(decisions.r_rdy), tas_out.i.p.eq(decisions.r_data),
                         decisions.r_en.eq(tas_out.i.ready)]
        dec = tas_out.o.p
        wb = mlp.o.valid
        m.d.comb += [mlp.i.p.layer.eq(grp_layer), mlp.i.p.tag.eq(dec.row)]
        m.d.comb += [mlp.i.valid.eq(tas_out.o.valid & ~dec.replay),
                     tas_out.o.ready.eq(Mux(dec.replay, ~wb, mlp.i.ready))]
        want_read = tas_out.o.valid & dec.replay

        # --- replay cache: write-backs of computed rows first, then reads ----------------------
        m.d.comb += [
            cache.i.p.write.eq(wb), cache.i.p.layer.eq(grp_layer), cache.i.p.index.eq(grp_index),
            cache.i.p.row.eq(Mux(wb, mlp.o.p.tag, dec.row)), cache.i.p.y.eq(mlp.o.p.y),
        ]
        # The cache's output never waits: every result (from the cache or the MLP) finds its
        # reorder-buffer slot free, because a group's rows have distinct tags, each is written
        # once, and a group starts only after the previous one has left. So nothing but the two
        # producers' own valids decides who writes the reorder buffer (the cache first), and
        # neither the reorder buffer's slot select nor a handshake reaches the cache's pipeline
        # enable (its 43 block RAMs' clock enables). ``cov_result_refused`` counts any result
        # that would find its slot full (the testbench requires 0).
        rob_from_mlp = Signal()
        m.d.comb += [
            rob_from_mlp.eq(wb & ~cache.o.valid),
            mlp.o.ready.eq(rob_from_mlp),
            cache.i.valid.eq(rob_from_mlp | (want_read & ~wb)),
            cache.o.ready.eq(1),
        ]
        with m.If(cache.o.valid):
            m.d.comb += [rob.i.valid.eq(1), rob.i.p.tag.eq(cache.o.p.row), rob.i.p.data.replay.eq(1)]
        with m.Else():
            m.d.comb += [rob.i.valid.eq(rob_from_mlp), rob.i.p.tag.eq(mlp.o.p.tag), rob.i.p.data.replay.eq(0)]
        # The row itself is selected by copies of the cache's output valid, one per group of
        # ``ROB_SELECT_BYTES`` bytes, each beside its slice of the reorder buffer's slots.
        groups = -(-d // ROB_SELECT_BYTES)
        picks = word_copies(m, platform, cache.o_valid_next, groups, "rob_pick")
        for g in range(groups):
            lo, hi = g * ROB_SELECT_BYTES, min(d, (g + 1) * ROB_SELECT_BYTES)
            for e in range(lo, hi):
                m.d.comb += rob.i.p.data.y[e].eq(Mux(picks[g], cache.o.p.y[e], mlp.o.p.y[e]))

        # --- in-order output --------------------------------------------------------------------
        # Each row's TAS, from its decision to its output (groups do not overlap).
        tas_of = [Signal(signed(len(dec.tas)), name=f"tas_of_{b}") for b in range(B)]
        out_last = Signal()
        m.d.comb += [
            out_last.eq(last_seen & (rows_out + 1 == rows_in)),
            self.y.valid.eq(rob.o.valid), self.y.p.data.eq(rob.o.p.y),
            self.y.p.user.replay.eq(rob.o.p.replay), self.y.p.user.row.eq(rob.head),
            self.y.p.user.tas.eq(Array(tas_of)[rob.head]),
            self.y.p.last.eq(out_last), rob.o.ready.eq(self.y.ready),
        ]
        gave = self.y.valid & self.y.ready

        # --- counters ---------------------------------------------------------------------------
        # They count registered events (a cycle late), so that no handshake between blocks drives
        # their enables. A group's cycles run from its first row's beat to its last output beat,
        # both counted: ``elapsed`` counts the cycles in between (``in_group``), and is read and
        # cleared the cycle after the last beat (``done_r``), when it has counted that beat too.
        elapsed = Signal(COUNTER_BITS)
        done_r = Signal()
        m.d.sync += done_r.eq(gave & out_last)
        with m.If(done_r):
            m.d.sync += [self.group_cycles.eq(elapsed + 1),
                         self.total_cycles.eq(self.total_cycles + elapsed + 1),
                         self.groups.eq(self.groups + 1), elapsed.eq(0)]
        with m.Elif(in_group):
            m.d.sync += elapsed.eq(elapsed + 1)
        with m.If(gave):
            m.d.sync += rows_out.eq(rows_out + 1)
            with m.If(out_last):
                m.d.sync += [in_group.eq(0), rows_in.eq(0), rows_out.eq(0), last_seen.eq(0)]
        dec_r = Signal.like(dec)
        dec_go = Signal()
        m.d.sync += [dec_r.eq(dec), dec_go.eq(tas_out.o.valid & tas_out.o.ready)]
        with m.If(dec_go):
            m.d.sync += Array(tas_of)[dec_r.row].eq(dec_r.tas)
            with m.If(dec_r.replay):
                m.d.sync += self.rows_replayed.eq(self.rows_replayed + 1)
            with m.Else():
                m.d.sync += self.rows_computed.eq(self.rows_computed + 1)
        for p in range(P):
            busy_r = Signal(name=f"core_busy_r_{p}")
            m.d.sync += busy_r.eq(mlp.core_busy[p])
            with m.If(busy_r):
                m.d.sync += self.core_busy[p].eq(self.core_busy[p] + 1)

        if self._coverage:
            level = tas.queue_level if with_tas else decisions.level
            with m.If(level > self.cov_tas_queue_peak):
                m.d.sync += self.cov_tas_queue_peak.eq(level)
            held = {"cov_finish_together": mlp.finishes >= 2,
                    "cov_tas_queue_empty": level == 0,
                    "cov_rob_full": rob.occupied.all(), "cov_rob_empty": ~rob.occupied.any(),
                    "cov_result_refused": rob.i.valid & ~rob.i.ready,
                    "cov_finish_same_row": mlp.finish_same_row,
                    "cov_drained_mid_group": in_group & ~last_seen & (rows_out == rows_in)}
            for p in range(P):
                held[f"cov_job_held_{p}"] = mlp.job_held[p]
                held[f"cov_job_free_{p}"] = ~mlp.job_held[p]
            fixed = ctrl.static | ctrl.chunk_rr
            for p in range(P):
                jobs, keys = getattr(self, f"obs_jobs_{p}"), getattr(self, f"obs_key_sum_{p}")
                with m.If(fixed & mlp.job_taken[p]):
                    m.d.sync += [jobs.eq(jobs + 1), keys.eq(keys + mlp.job_key[p])]
            events = coverage_events(self._cfg)
            for name, cond in held.items():
                if name not in events:
                    continue
                counter = getattr(self, name)
                with m.If(cond):
                    m.d.sync += counter.eq(counter + 1)
        return m
