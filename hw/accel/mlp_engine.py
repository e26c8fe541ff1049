"""The MLP datapath: dispatcher, two matrix-vector cores on one weight store, the output stage."""

import math

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.dispatcher import Dispatcher, row_job_layout
from hw.accel.layouts import h_params_layout, lut_load_layout, row_out_layout
from hw.accel.mv_core import MvCore, gu_rq_load_layout, gu_table_depth, silu_table_address, silu_table_depth
from hw.accel.row_out import RowOut, rqd_load_layout
from hw.accel.weight_store import WeightStore
from hw.lib.shared_table import SharedTable
from hw.lib.widths import mul_const
from sw.config import AccelConfig

__all__ = ["MlpEngine", "shared_tables"]


def shared_tables(cfg: AccelConfig) -> dict[str, tuple[int, int]]:
    """The tables both cores read (two cores only), by submodule name: ``(width, depth)`` of the
    gate/up requantisation table and of the SiLU table."""
    if cfg.cores != 2:
        return {}
    return {"rq_table": (h_params_layout().size, gu_table_depth(cfg)),
            "silu_table": (8, silu_table_depth(cfg))}


class MlpEngine(wiring.Component):
    """Computed rows in, their int8 MLP outputs out (in the order rows finish, with their tag).

    A :class:`hw.accel.dispatcher.Dispatcher` cuts each row into ``chunks`` jobs for the ``cores``
    :class:`hw.accel.mv_core.MvCore` (DRS, chunk round-robin or row-static); the cores read one
    :class:`hw.accel.weight_store.WeightStore` (core ``p`` on port ``p``), keep each row's int32
    accumulators, and report every finished D pass to the :class:`hw.accel.row_out.RowOut`, which adds
    the cores' parts of a complete row and requantises it. With two cores, the gate/up
    requantisation table and the SiLU table are one :class:`hw.lib.shared_table.SharedTable` each,
    read by core 0 on port A and core 1 on port B (half the block RAM of a table per core).

    Parameters
    ----------
    cfg : AccelConfig
        ``cores`` must be 1 or 2 (one weight-store port per core).
    tag_bits : int

    Members
    -------
    i : In(stream.Signature(hw.accel.dispatcher.row_job_layout(layers, tag_bits)))
        Rows to compute, by tag; their ``x`` is read from the row buffer on ``x_addr``/``x_data``.
    x_addr : Out(tag_bits).array(cores)
        Core ``p``'s read address into the row buffer: the tag of the job the dispatcher offers it.
    x_data : In(ArrayLayout(signed(8), d_model)).array(cores)
        The row buffer's row at ``x_addr[p]`` in the same cycle (an asynchronous read): core
        ``p``'s free x register follows it until the core holds a job.
    o : Out(stream.Signature(hw.accel.layouts.row_out_layout(d_model, tag_bits)))
    w : In(...)  weight-block writes (the store's ``w``)
    rq : In(stream.Signature(gu_rq_load_layout(cfg), always_ready=True))  gate/up constants, to every core
    rqd : In(stream.Signature(rqd_load_layout(cfg), always_ready=True))  down constants
    lut : In(stream.Signature(lut_load_layout(layers), always_ready=True))  SiLU tables, to every core
    h : In(ArrayLayout(h_params_layout(), layers))
    static, chunk_rr : In(1)
        Scheduling (configuration).
    group_start : In(1)
        A new group: the row accumulators start empty.
    core_busy : Out(1).array(cores)
        The core holds a job, runs a pass or has a chunk waiting for its D pass.
    finishes : Out(range(cores + 1))
        Cores that report a finished D pass to the output stage in this cycle (for coverage counts).
    finish_same_row : Out(1)
        Two cores report finished D passes of the same row in this cycle (for coverage counts;
        reachable only when a row's chunks do not split evenly over the cores, docs/verification.md).
    job_held : Out(1).array(cores)
        The core's one-job slot is full: it takes no job from the dispatcher (for coverage counts).
    job_taken : Out(1).array(cores)
    job_key : Out(range(batch * chunks)).array(cores)
        The core takes a job in this cycle, chunk ``key mod chunks`` of row ``key // chunks``
        (so that a testbench can check which core the schedule gave it).
    """

    def __init__(self, cfg: AccelConfig, *, tag_bits: int):
        if cfg.cores not in (1, 2):
            raise ValueError(f"MlpEngine: the weight store has two read ports, so cores must be 1 or 2, "
                             f"not {cfg.cores!r}")
        self._cfg, self._tb = cfg, tag_bits
        # The store copies its read address once per group of 4 lanes (fewer when there are fewer).
        self._store = WeightStore(cfg, lanes_per_copy=math.gcd(4, cfg.mv_in * cfg.mv_out // 2))
        super().__init__({
            "i": In(stream.Signature(row_job_layout(cfg.layers, tag_bits))),
            "x_addr": Out(max(1, tag_bits)).array(cfg.cores),
            "x_data": In(data.ArrayLayout(signed(8), cfg.d_model)).array(cfg.cores),
            "o": Out(stream.Signature(row_out_layout(cfg.d_model, tag_bits))),
            "w": In(self._store.signature.members["w"].signature.flip()),
            "rq": In(stream.Signature(gu_rq_load_layout(cfg), always_ready=True)),
            "rqd": In(stream.Signature(rqd_load_layout(cfg), always_ready=True)),
            "lut": In(stream.Signature(lut_load_layout(cfg.layers), always_ready=True)),
            "h": In(data.ArrayLayout(h_params_layout(), cfg.layers)),
            "static": In(1), "chunk_rr": In(1),
            "group_start": In(1),
            "core_busy": Out(1).array(cfg.cores),
            "finishes": Out(range(cfg.cores + 1)),
            "finish_same_row": Out(1),
            "job_held": Out(1).array(cfg.cores),
            "job_taken": Out(1).array(cfg.cores),
            "job_key": Out(range(cfg.batch * cfg.chunks)).array(cfg.cores),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, P, tb = self._cfg, self._cfg.cores, self._tb
        m.submodules.store = store = self._store
        m.submodules.disp = disp = Dispatcher(layers=cfg.layers, chunks=cfg.chunks, cores=P, tag_bits=tb)
        m.submodules.out = out = RowOut(cfg, cores=P, tag_bits=tb)
        wiring.connect(m, wiring.flipped(self.w), store.w)
        wiring.connect(m, wiring.flipped(self.i), disp.i)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        wiring.connect(m, wiring.flipped(self.rqd), out.rq)
        m.d.comb += [disp.static.eq(self.static), disp.chunk_rr.eq(self.chunk_rr)]
        shared = P == 2
        if shared:
            tables = shared_tables(cfg)
            m.submodules.rq_table = rq_table = SharedTable(*tables["rq_table"])
            m.submodules.silu_table = silu_table = SharedTable(*tables["silu_table"])
            m.d.comb += [
                rq_table.w.valid.eq(self.rq.valid), rq_table.w.p.addr.eq(self.rq.p.addr),
                rq_table.w.p.data.eq(self.rq.p.p),
                silu_table.w.valid.eq(self.lut.valid), silu_table.w.p.addr.eq(silu_table_address(self.lut.p)),
                silu_table.w.p.data.eq(self.lut.p.value),
            ]
        for p in range(P):
            core = MvCore(cfg, w_latency=store.latency, tag_bits=tb, shared_tables=shared)
            m.submodules[f"core_{p}"] = core
            job = disp.o[p]
            m.d.comb += [core.i.valid.eq(job.valid), job.ready.eq(core.i.ready),
                         core.i.p.layer.eq(job.p.layer), core.i.p.chunk.eq(job.p.chunk),
                         core.i.p.tag.eq(job.p.tag), self.x_addr[p].eq(job.p.tag),
                         core.i.p.x.eq(self.x_data[p])]
            if shared:
                m.d.comb += [rq_table.r_addr[p].eq(core.rq_ra), core.rq_rd.eq(rq_table.r_data[p]),
                             silu_table.r_addr[p].eq(core.lu_ra), core.lu_rd.eq(silu_table.r_data[p])]
            else:
                m.d.comb += [core.rq.valid.eq(self.rq.valid), core.rq.p.eq(self.rq.p),
                             core.lut.valid.eq(self.lut.valid), core.lut.p.eq(self.lut.p)]
            m.d.comb += [
                store.r_addr[p].eq(core.w_addr), core.w_data.eq(store.r_data[p]),
                core.h.eq(self.h), core.group_start.eq(self.group_start),
                core.acc_addr.eq(out.acc_addr), out.acc_data[p].eq(core.acc_data),
                out.acc_touched[p].eq(core.acc_touched),
                out.done[p].valid.eq(core.done.valid), out.done[p].p.eq(core.done.p),
                self.core_busy[p].eq(core.busy), self.job_held[p].eq(~core.i.ready),
                self.job_taken[p].eq(core.i.valid & core.i.ready),
                self.job_key[p].eq(mul_const(core.i.p.tag, cfg.chunks) + core.i.p.chunk),
            ]
        done = [m.submodules[f"core_{p}"].done for p in range(P)]
        m.d.comb += self.finishes.eq(sum(d.valid for d in done))
        pairs = [done[a].valid & done[b].valid & (done[a].p.tag == done[b].p.tag)
                 for a in range(P) for b in range(a + 1, P)]
        m.d.comb += self.finish_same_row.eq(Cat(*pairs).any() if pairs else 0)
        return m
