"""The FastCar accelerator: TAS comparator, replay cache, DRS dispatcher, MLP cores, in-order output."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.dispatcher import Dispatcher
from hw.accel.layouts import COUNTER_BITS, FRAME_BITS, ctrl_layout, out_user_layout, row_in_layout
from hw.accel.mlp_core import MlpCore
from hw.accel.reducer import Reducer
from hw.accel.replay_cache import ReplayCache
from hw.accel.requant import params_layout
from hw.accel.swiglu_gate import h_params_layout, lut_load_layout
from hw.accel.systolic_array import weight_layout
from hw.accel.tas_unit import TasUnit
from hw.lib.packet_arbiter import PacketArbiter
from hw.lib.reorder_buffer import ReorderBuffer
from hw.lib.widths import index_bits
from sw.config import AccelConfig

__all__ = ["Accelerator", "Target", "row_in_layout", "cfg_layout", "ctrl_layout", "out_user_layout",
           "COUNTER_BITS"]



class Target:
    """``target`` codes of configuration words."""
    WG, WU, WD, RQG, RQU, RQD, LUT, H, CTRL = range(9)


def cfg_layout(cfg: AccelConfig):
    """One configuration word: ``target``, ``addr`` and the target's payload in ``data`` (for the
    v2 datapath, :func:`hw.accel.accelerator_v2.cfg_layout_v2`)."""
    if cfg.datapath == 2:
        from hw.accel.accelerator_v2 import cfg_layout_v2
        return cfg_layout_v2(cfg)
    tiles = (cfg.gate_tile, cfg.down_tile)
    widths = [weight_layout(t)["data"].width for t in tiles]
    widths += [params_layout(cfg.cols).size, lut_load_layout(cfg.layers).size,
               h_params_layout().size, ctrl_layout().size]
    banks = cfg.layers * cfg.chunks
    depth = max(banks * t.weight_depth for t in tiles)
    return data.StructLayout({"target": 4, "addr": index_bits(max(depth, 256)), "data": max(widths)})


class Accelerator(wiring.Component):
    """The decode-phase FastCar accelerator for one group (one layer at one decode step) at a time.

    Dataflow of a group of ``B`` rows (``docs/architecture.md`` has the diagram and cycle model):

    1. Rows arrive on ``x`` (``tlast`` on the group's last row). For each, the
       :class:`hw.accel.tas_unit.TasUnit` computes the integer TAS against ``k_prev`` and decides.
    2. A replayed row is read from the :class:`hw.accel.replay_cache.ReplayCache` (the output used one
       frame earlier at this position, layer and row).
    3. A computed row goes to the :class:`hw.accel.dispatcher.Dispatcher`, which cuts it into
       ``chunks`` hidden chunks and hands each to a free :class:`hw.accel.mlp_core.MlpCore` lane (DRS),
       to core ``chunk mod cores`` (chunk round-robin) or to core ``row mod cores`` (static). A
       :class:`hw.lib.packet_arbiter.PacketArbiter` merges the cores' int32 partial sums into the
       :class:`hw.accel.reducer.Reducer`, which adds and requantises them; the result is written back
       to the replay cache.
    4. A :class:`hw.lib.reorder_buffer.ReorderBuffer` releases the rows in row order on ``y``, with the
       replay bit in ``user``.

    A new group is accepted once the previous one has left completely: layer ``l + 1`` needs the
    output of layer ``l``, so groups are not overlapped.

    Members
    -------
    cfg : In(stream.Signature({data: cfg_layout(cfg)}))
        Weights, requantisation tables, SiLU tables and the control word.
    x : In(stream.Signature({data: row_in_layout(cfg), last}))
        Row inputs.
    y : Out(stream.Signature({data: ArrayLayout(signed(8), d_model), user: out_user_layout, last}))
        Row outputs in row order.
    group_cycles, total_cycles, groups, rows_replayed, rows_computed : Out(COUNTER_BITS)
        Cycles of the last group (first row taken to last row given, inclusive), their running
        sum, groups done, and rows by decision.
    core_busy : Out(COUNTER_BITS).array(cores)
        Cycles in which each core had at least one chunk in flight.
    """

    def __init__(self, cfg: AccelConfig):
        if cfg.datapath != 1:
            raise ValueError(f"Accelerator builds the v1 datapath; this configuration asks for datapath "
                             f"{cfg.datapath!r} (use hw.accel.top.make_accelerator)")
        self._cfg = cfg
        d = cfg.d_model
        members = {
            "cfg": In(stream.Signature(data.StructLayout({"data": cfg_layout(cfg)}))),
            "x": In(stream.Signature(data.StructLayout({"data": row_in_layout(cfg), "last": 1}))),
            "y": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(signed(8), d), "user": out_user_layout(cfg), "last": 1}))),
            "core_busy": Out(COUNTER_BITS).array(cfg.cores),
        }
        for name in ("group_cycles", "total_cycles", "groups", "rows_replayed", "rows_computed"):
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

        m.submodules.tas = tas = TasUnit(d, cfg.layers, cfg.tokens_per_frame, B, lanes=cfg.tas_lanes,
                                         frame_bits=FRAME_BITS)
        m.submodules.cache = cache = ReplayCache(d, cfg.layers, cfg.tokens_per_frame, B)
        m.submodules.disp = disp = Dispatcher(d, layers=cfg.layers, chunks=cfg.chunks, cores=P,
                                              tag_bits=tag_bits)
        m.submodules.cores = cores = MlpCore(d, cfg.d_ff, layers=cfg.layers, chunks=cfg.chunks,
                                             rows=cfg.rows, cols=cfg.cols, cores=P,
                                             gate_lanes=cfg.gate_lanes, tag_bits=tag_bits)
        partial = cores.o.signature.members["payload"].shape if P == 1 else \
            cores.o[0].signature.members["payload"].shape
        m.submodules.arb = arb = PacketArbiter(partial, P)
        m.submodules.red = red = Reducer(d, cfg.cols, layers=cfg.layers, chunks=cfg.chunks, tags=B)
        rob_layout = data.StructLayout({"y": data.ArrayLayout(signed(8), d), "replay": 1})
        m.submodules.rob = rob = ReorderBuffer(rob_layout, max(2, B))

        # --- configuration -------------------------------------------------------------------
        c = self.cfg.p.data
        m.d.comb += self.cfg.ready.eq(1)
        ctrl = Signal(ctrl_layout())
        h = Signal(data.ArrayLayout(h_params_layout(), cfg.layers))
        load = self.cfg.valid
        for name, target in (("wg", Target.WG), ("wu", Target.WU), ("wd", Target.WD)):
            port = getattr(cores, name)
            m.d.comb += [port.valid.eq(load & (c.target == target)), port.p.addr.eq(c.addr),
                         port.p.data.eq(c.data)]
        for port, target in ((cores.rqg, Target.RQG), (cores.rqu, Target.RQU), (red.rq, Target.RQD)):
            m.d.comb += [port.valid.eq(load & (c.target == target)), port.p.addr.eq(c.addr),
                         port.p.p.eq(c.data)]
        m.d.comb += [cores.lut.valid.eq(load & (c.target == Target.LUT)), cores.lut.p.eq(c.data)]
        with m.If(load & (c.target == Target.H)):
            m.d.sync += h[c.addr[:index_bits(cfg.layers)]].eq(c.data)
        with m.If(load & (c.target == Target.CTRL)):
            m.d.sync += ctrl.eq(c.data)
        m.d.comb += [
            cores.h.eq(h), disp.static.eq(ctrl.static), disp.chunk_rr.eq(ctrl.chunk_rr),
            tas.refresh_en.eq(ctrl.refresh_en), tas.refresh_every.eq(ctrl.refresh_every),
            tas.max_chain_en.eq(ctrl.max_chain_en), tas.max_chain.eq(ctrl.max_chain),
        ]

        # --- compute path: dispatcher -> cores -> arbiter -> reducer ---------------------------
        for p in range(P):
            ci = cores.i if P == 1 else cores.i[p]
            co = cores.o if P == 1 else cores.o[p]
            wiring.connect(m, disp.o[p], ci)
            wiring.connect(m, co, arb.i[p])
        wiring.connect(m, arb.o, red.i)

        # --- front end: one row at a time through the TAS unit ---------------------------------
        row = Signal(row_in_layout(cfg))
        row_last = Signal()
        grp_layer = Signal.like(row.layer)
        grp_index = Signal.like(row.index)
        rows_in = Signal(range(B + 1))          # rows of the current group taken
        last_seen = Signal()                    # the group's tlast has been taken
        rows_out = Signal(range(B + 1))
        in_group = Signal()
        decision_replay = Signal()
        want_read = Signal()
        want_job = Signal()
        m.d.comb += [
            tas.i.p.q.eq(row.q), tas.i.p.k.eq(row.k), tas.i.p.threshold.eq(row.threshold),
            tas.i.p.layer.eq(row.layer), tas.i.p.frame.eq(row.frame), tas.i.p.index.eq(row.index),
            tas.i.p.row.eq(row.row),
            disp.i.p.x.eq(row.x), disp.i.p.layer.eq(row.layer), disp.i.p.tag.eq(row.row),
        ]
        with m.FSM(name="front"):
            with m.State("TAKE"):
                m.d.comb += self.x.ready.eq(~last_seen)
                with m.If(self.x.valid & self.x.ready):
                    m.d.sync += [row.eq(self.x.p.data), row_last.eq(self.x.p.last),
                                 grp_layer.eq(self.x.p.data.layer), grp_index.eq(self.x.p.data.index),
                                 rows_in.eq(rows_in + 1), last_seen.eq(self.x.p.last),
                                 in_group.eq(1)]
                    m.next = "TAS"
            with m.State("TAS"):
                m.d.comb += tas.i.valid.eq(1)
                with m.If(tas.i.ready):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                m.d.comb += tas.o.ready.eq(1)
                with m.If(tas.o.valid):
                    m.d.sync += decision_replay.eq(tas.o.p.replay)
                    with m.If(tas.o.p.replay):
                        m.next = "READ"
                    with m.Else():
                        m.next = "JOB"
            with m.State("READ"):
                m.d.comb += want_read.eq(1)
                with m.If(cache.i.ready & ~red.o.valid):
                    m.next = "TAKE"
            with m.State("JOB"):
                m.d.comb += [want_job.eq(1), disp.i.valid.eq(1)]
                with m.If(disp.i.ready):
                    m.next = "TAKE"

        # --- replay cache: write-backs of computed rows first, then reads ----------------------
        wb = red.o.valid
        m.d.comb += [
            cache.i.p.write.eq(wb),
            cache.i.p.layer.eq(grp_layer),
            cache.i.p.index.eq(grp_index),
            cache.i.p.row.eq(Mux(wb, red.o.p.tag, row.row)),
            cache.i.p.y.eq(red.o.p.y),
        ]
        # A computed row enters the cache and the reorder buffer in the same cycle.
        read_row = Signal.like(row.row)
        rob_from_red = Signal()
        m.d.comb += [
            rob_from_red.eq(wb & cache.i.ready & rob.i.ready & ~cache.o.valid),
            red.o.ready.eq(rob_from_red),
            cache.i.valid.eq(rob_from_red | (want_read & ~wb)),
        ]
        with m.If(want_read & ~wb & cache.i.ready):
            m.d.sync += read_row.eq(row.row)
        # Cache reads return one cycle later and go straight into the reorder buffer.
        m.d.comb += cache.o.ready.eq(rob.i.ready)
        with m.If(cache.o.valid):
            m.d.comb += [rob.i.valid.eq(1), rob.i.p.tag.eq(read_row),
                         rob.i.p.data.y.eq(cache.o.p), rob.i.p.data.replay.eq(1)]
        with m.Else():
            m.d.comb += [rob.i.valid.eq(rob_from_red), rob.i.p.tag.eq(red.o.p.tag),
                         rob.i.p.data.y.eq(red.o.p.y), rob.i.p.data.replay.eq(0)]

        # --- in-order output --------------------------------------------------------------------
        out_last = Signal()
        m.d.comb += [
            out_last.eq(last_seen & (rows_out + 1 == rows_in)),
            self.y.valid.eq(rob.o.valid),
            self.y.p.data.eq(rob.o.p.y),
            self.y.p.user.replay.eq(rob.o.p.replay),
            self.y.p.user.row.eq(rob.head),
            self.y.p.last.eq(out_last),
            rob.o.ready.eq(self.y.ready),
        ]
        gave = self.y.valid & self.y.ready

        # --- counters ---------------------------------------------------------------------------
        elapsed = Signal(COUNTER_BITS)
        with m.If(in_group | (self.x.valid & self.x.ready)):
            m.d.sync += elapsed.eq(elapsed + 1)
        with m.If(gave):
            m.d.sync += rows_out.eq(rows_out + 1)
            with m.If(out_last):
                m.d.sync += [
                    self.group_cycles.eq(elapsed + 1),
                    self.total_cycles.eq(self.total_cycles + elapsed + 1),
                    self.groups.eq(self.groups + 1),
                    elapsed.eq(0), in_group.eq(0), rows_in.eq(0), rows_out.eq(0), last_seen.eq(0),
                ]
        with m.If(tas.o.valid & tas.o.ready):
            with m.If(tas.o.p.replay):
                m.d.sync += self.rows_replayed.eq(self.rows_replayed + 1)
            with m.Else():
                m.d.sync += self.rows_computed.eq(self.rows_computed + 1)
        for p in range(P):
            ci = cores.i if P == 1 else cores.i[p]
            co = cores.o if P == 1 else cores.o[p]
            inflight = Signal(range(64), name=f"inflight_{p}")
            took = ci.valid & ci.ready
            done = co.valid & co.ready & co.p.last
            with m.If(took & ~done):
                m.d.sync += inflight.eq(inflight + 1)
            with m.Elif(done & ~took):
                m.d.sync += inflight.eq(inflight - 1)
            with m.If((inflight != 0) | took):
                m.d.sync += self.core_busy[p].eq(self.core_busy[p] + 1)
        return m
