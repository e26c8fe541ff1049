"""The v2 FastCar accelerator: the TAS of a group's rows in parallel, replay cache, the matrix-vector
MLP datapath, in-order output. The same streams and counters as :class:`hw.accel.accelerator.Accelerator`."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.layouts import COUNTER_BITS, FRAME_BITS, ctrl_layout, out_user_layout, row_in_layout
from hw.accel.mlp_engine import MlpEngine
from hw.accel.mv_core import gu_rq_load_layout
from hw.accel.replay_cache import ReplayCache
from hw.accel.row_out import rqd_load_layout
from hw.accel.swiglu_gate import h_params_layout, lut_load_layout
from hw.accel.tas_group import TasGroup
from hw.lib.reorder_buffer import ReorderBuffer
from hw.lib.widths import index_bits
from sw.config import AccelConfig

__all__ = ["AcceleratorV2", "TargetV2", "cfg_layout_v2"]


class TargetV2:
    """``target`` codes of the v2 configuration words."""
    W, RQGU, RQD, LUT, H, CTRL = range(6)


def cfg_layout_v2(cfg: AccelConfig):
    """One configuration word: ``target``, ``addr`` and the target's payload in ``data``.

    - ``W``: weight block ``addr`` (:func:`hw.accel.mv_layout.weight_blocks` order), ``data`` its
      ``mv_out x mv_in`` int8 weights, element ``n * mv_in + k``;
    - ``RQGU``: gate/up table entry ``addr`` (:func:`hw.accel.mv_layout.gu_table_index`), ``data``
      ``h_params_layout`` (mult, shift);
    - ``RQD``: ``data`` a :func:`hw.accel.row_out.rqd_load_layout` word (``addr`` unused);
    - ``LUT``: ``data`` a :func:`hw.accel.swiglu_gate.lut_load_layout` word;
    - ``H``: layer ``addr``'s ``mult_h, shift_h``; ``CTRL``: the control word.
    """
    widths = [8 * cfg.mv_in * cfg.mv_out, h_params_layout().size, rqd_load_layout(cfg).size,
              lut_load_layout(cfg.layers).size, ctrl_layout().size]
    addr = max(index_bits(cfg.mv_weight_blocks), gu_rq_load_layout(cfg)["addr"].width)
    return data.StructLayout({"target": 3, "addr": addr, "data": max(widths)})


class AcceleratorV2(wiring.Component):
    """The decode-phase FastCar accelerator, v2 datapath, one group (one layer at one decode step)
    at a time.

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

    Members
    -------
    cfg : In(stream.Signature({data: cfg_layout_v2(cfg)}))
    x : In(stream.Signature({data: row_in_layout(cfg), last}))
    y : Out(stream.Signature({data: ArrayLayout(signed(8), d_model), user: out_user_layout, last}))
    group_cycles, total_cycles, groups, rows_replayed, rows_computed : Out(COUNTER_BITS)
        As :class:`hw.accel.accelerator.Accelerator`.
    core_busy : Out(COUNTER_BITS).array(cores)
        Cycles in which each core held a job, ran a pass or had a chunk waiting for its D pass.
    """

    def __init__(self, cfg: AccelConfig):
        if cfg.datapath != 2:
            raise ValueError(f"AcceleratorV2 builds the v2 datapath; this configuration asks for datapath "
                             f"{cfg.datapath!r} (use hw.accel.top.make_accelerator)")
        self._cfg = cfg
        members = {
            "cfg": In(stream.Signature(data.StructLayout({"data": cfg_layout_v2(cfg)}))),
            "x": In(stream.Signature(data.StructLayout({"data": row_in_layout(cfg), "last": 1}))),
            "y": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(signed(8), cfg.d_model), "user": out_user_layout(cfg), "last": 1}))),
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

        m.submodules.tas = tas = TasGroup(d, cfg.layers, cfg.tokens_per_frame, B, lanes=cfg.tas_lanes,
                                          frame_bits=FRAME_BITS)
        m.submodules.cache = cache = ReplayCache(d, cfg.layers, cfg.tokens_per_frame, B)
        m.submodules.mlp = mlp = MlpEngine(cfg, tag_bits=tag_bits)
        rob_layout = data.StructLayout({"y": data.ArrayLayout(signed(8), d), "replay": 1})
        m.submodules.rob = rob = ReorderBuffer(rob_layout, max(2, B))

        # --- configuration -------------------------------------------------------------------
        c = self.cfg.p.data
        load = self.cfg.valid
        m.d.comb += self.cfg.ready.eq(1)
        ctrl = Signal(ctrl_layout())
        h = Signal(data.ArrayLayout(h_params_layout(), cfg.layers))
        m.d.comb += [
            mlp.w.valid.eq(load & (c.target == TargetV2.W)), mlp.w.p.addr.eq(c.addr), mlp.w.p.data.eq(c.data),
            mlp.rq.valid.eq(load & (c.target == TargetV2.RQGU)), mlp.rq.p.addr.eq(c.addr),
            mlp.rq.p.p.eq(c.data),
            mlp.rqd.valid.eq(load & (c.target == TargetV2.RQD)), mlp.rqd.p.eq(c.data),
            mlp.lut.valid.eq(load & (c.target == TargetV2.LUT)), mlp.lut.p.eq(c.data),
        ]
        with m.If(load & (c.target == TargetV2.H)):
            m.d.sync += h[c.addr[:index_bits(cfg.layers)]].eq(c.data)
        with m.If(load & (c.target == TargetV2.CTRL)):
            m.d.sync += ctrl.eq(c.data)
        m.d.comb += [
            mlp.h.eq(h), mlp.static.eq(ctrl.static), mlp.chunk_rr.eq(ctrl.chunk_rr),
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
        m.d.comb += [
            tas.i.valid.eq(self.x.valid & ~last_seen),
            tas.i.p.q.eq(r.q), tas.i.p.k.eq(r.k), tas.i.p.threshold.eq(r.threshold),
            tas.i.p.layer.eq(r.layer), tas.i.p.frame.eq(r.frame), tas.i.p.index.eq(r.index),
            tas.i.p.row.eq(r.row),
            self.x.ready.eq(tas.i.ready & ~last_seen),
        ]
        took = self.x.valid & self.x.ready
        m.submodules.xbuf = xbuf = memory.Memory(shape=data.ArrayLayout(signed(8), d), depth=B, init=[])
        xw = xbuf.write_port()
        xr = xbuf.read_port(domain="comb")
        m.d.comb += [xw.en.eq(took), xw.addr.eq(r.row), xw.data.eq(r.x)]
        m.d.comb += mlp.group_start.eq(took & ~in_group)
        with m.If(took):
            m.d.sync += [rows_in.eq(rows_in + 1), last_seen.eq(self.x.p.last), in_group.eq(1)]
            with m.If(~in_group):
                m.d.sync += [grp_layer.eq(r.layer), grp_index.eq(r.index)]

        # --- decisions: replayed rows to the cache, computed rows to the MLP -------------------
        dec = tas.o.p
        wb = mlp.o.valid
        m.d.comb += [xr.addr.eq(dec.row), mlp.i.p.x.eq(xr.data), mlp.i.p.layer.eq(grp_layer),
                     mlp.i.p.tag.eq(dec.row)]
        m.d.comb += [mlp.i.valid.eq(tas.o.valid & ~dec.replay),
                     tas.o.ready.eq(Mux(dec.replay, cache.i.ready & ~wb, mlp.i.ready))]
        want_read = tas.o.valid & dec.replay

        # --- replay cache: write-backs of computed rows first, then reads ----------------------
        m.d.comb += [
            cache.i.p.write.eq(wb), cache.i.p.layer.eq(grp_layer), cache.i.p.index.eq(grp_index),
            cache.i.p.row.eq(Mux(wb, mlp.o.p.tag, dec.row)), cache.i.p.y.eq(mlp.o.p.y),
        ]
        read_row = Signal(tag_bits)
        rob_from_mlp = Signal()
        m.d.comb += [
            rob_from_mlp.eq(wb & cache.i.ready & rob.i.ready & ~cache.o.valid),
            mlp.o.ready.eq(rob_from_mlp),
            cache.i.valid.eq(rob_from_mlp | (want_read & ~wb)),
        ]
        with m.If(want_read & ~wb & cache.i.ready):
            m.d.sync += read_row.eq(dec.row)
        m.d.comb += cache.o.ready.eq(rob.i.ready)
        with m.If(cache.o.valid):
            m.d.comb += [rob.i.valid.eq(1), rob.i.p.tag.eq(read_row),
                         rob.i.p.data.y.eq(cache.o.p), rob.i.p.data.replay.eq(1)]
        with m.Else():
            m.d.comb += [rob.i.valid.eq(rob_from_mlp), rob.i.p.tag.eq(mlp.o.p.tag),
                         rob.i.p.data.y.eq(mlp.o.p.y), rob.i.p.data.replay.eq(0)]

        # --- in-order output --------------------------------------------------------------------
        out_last = Signal()
        m.d.comb += [
            out_last.eq(last_seen & (rows_out + 1 == rows_in)),
            self.y.valid.eq(rob.o.valid), self.y.p.data.eq(rob.o.p.y),
            self.y.p.user.replay.eq(rob.o.p.replay), self.y.p.user.row.eq(rob.head),
            self.y.p.last.eq(out_last), rob.o.ready.eq(self.y.ready),
        ]
        gave = self.y.valid & self.y.ready

        # --- counters ---------------------------------------------------------------------------
        elapsed = Signal(COUNTER_BITS)
        with m.If(in_group | took):
            m.d.sync += elapsed.eq(elapsed + 1)
        with m.If(gave):
            m.d.sync += rows_out.eq(rows_out + 1)
            with m.If(out_last):
                m.d.sync += [
                    self.group_cycles.eq(elapsed + 1), self.total_cycles.eq(self.total_cycles + elapsed + 1),
                    self.groups.eq(self.groups + 1),
                    elapsed.eq(0), in_group.eq(0), rows_in.eq(0), rows_out.eq(0), last_seen.eq(0),
                ]
        with m.If(tas.o.valid & tas.o.ready):
            with m.If(dec.replay):
                m.d.sync += self.rows_replayed.eq(self.rows_replayed + 1)
            with m.Else():
                m.d.sync += self.rows_computed.eq(self.rows_computed + 1)
        for p in range(P):
            with m.If(mlp.core_busy[p]):
                m.d.sync += self.core_busy[p].eq(self.core_busy[p] + 1)
        return m
