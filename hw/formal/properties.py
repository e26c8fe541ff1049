"""The formal properties of the project, each on a small but representative parameterisation.

A :class:`Property` names the block it checks (source file and class) and builds its property
wrapper from that class, so that a failing twin test can build the same wrapper around a copy of
the block with a planted bug. ``tests/formal/test_properties.py`` runs them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amaranth.hdl import unsigned

from hw.formal.accelerator import assume_groups
from hw.formal.accelerator_v2 import HandshakeAcceleratorV2
from hw.formal.accumulators import PartialSumWidth
from hw.formal.dispatcher import DispatcherWork
from hw.formal.handshake import StreamHandshake
from hw.formal.mv_unit import MvUnitWidth
from hw.formal.packet_arbiter import PacketArbiterMerge
from hw.formal.reorder_buffer import ReorderBufferOrder
from hw.formal.replay_cache import ReplayCacheMemory
from hw.formal.row_out import RowOutRows
from hw.formal.tas_group import TasGroupOrder
from hw.formal.weight_store import WeightStoreMemory

__all__ = ["Property", "PROPERTIES", "TINY_ACCEL", "TINY_V2", "by_name"]


def _tiny_accel():
    from sw.config import AccelConfig

    # The smallest accelerator that still has two cores, two chunks per row, two rows per group
    # and the whole dataflow (TAS, cache, dispatcher, cores, arbiter, reducer, reorder buffer).
    return AccelConfig(d_model=2, d_ff=4, layers=1, tokens_per_frame=1, batch=2, rows=1, cols=1,
                       cores=2, chunks=2, gate_lanes=1, tas_lanes=2, mv_in=1, mv_out=1, datapath=1)


TINY_ACCEL = _tiny_accel()


def _tiny_v2():
    from sw.config import AccelConfig

    # The smallest v2 accelerator with two cores, two chunks per row and two rows per group: the
    # matrix-vector unit takes 2 x 1 blocks (mv_in even for the weight store), a D pass lasts
    # 2 x 2 blocks (at least MvCore's ACC_WRITE_DISTANCE), two chain counters per TAS engine.
    return AccelConfig(d_model=2, d_ff=8, layers=1, tokens_per_frame=2, batch=2, rows=1, cols=1,
                       cores=2, chunks=2, gate_lanes=1, tas_lanes=2, mv_in=2, mv_out=1, datapath=2)


TINY_V2 = _tiny_v2()


@dataclass(frozen=True)
class Property:
    """One SymbiYosys task.

    Attributes
    ----------
    name : str
        Task name (``build/formal/<name>/``).
    what : str
        The property in one line.
    source, member : str
        The block's source file and the name (class or function) that :attr:`build` takes.
    build : callable
        ``build(member) -> wrapper``.
    mode : str
        ``"prove"`` (k-induction) or ``"bmc"``.
    depth : int
        Induction length or BMC depth.
    holds : bool
        Whether the design satisfies it (``False`` records a known violation of the RTL).
    deep : int or None
        A longer BMC depth for the deep run (``FASTCAR_FORMAL_DEEP=1``).
    nomem : bool
        Memories mapped to registers before solving (:func:`tb.formal.check`'s ``nomem``);
        ``False`` keeps them as arrays for the solver (a 1,024-word block RAM).
    """

    name: str
    what: str
    source: str
    member: str
    build: Callable
    mode: str
    depth: int
    holds: bool = True
    deep: int | None = None
    nomem: bool = True

    def wrapper(self, member=None):
        """The property wrapper around the real block, or around ``member`` (a planted-bug copy)."""
        if member is None:
            import importlib

            module = importlib.import_module(self.source.removesuffix(".py").replace("/", "."))
            member = getattr(module, self.member)
        return self.build(member)


def _dispatcher(cls):
    return cls(2, layers=2, chunks=3, cores=3, tag_bits=2)


def _arbiter(cls):
    from amaranth.lib import data

    return cls(data.StructLayout({"data": 2, "last": 1}), 3)


PROPERTIES = [
    # --- stream handshake (valid held with a stable payload until ready) ----------------------
    Property("handshake_dispatcher", "dispatcher o[0..2]: valid and payload held until ready "
             "(static and chunk_rr constant, any mode)", "hw/accel/dispatcher.py", "Dispatcher",
             lambda cls: StreamHandshake(_dispatcher(cls), inputs=["i"], outputs=["o"],
                                         constants=["static", "chunk_rr"]), "prove", 4),
    Property("handshake_reorder_buffer", "reorder buffer o: valid and payload held until ready",
             "hw/lib/reorder_buffer.py", "ReorderBuffer",
             lambda cls: StreamHandshake(cls(unsigned(4), 4), inputs=["i"], outputs=["o"]),
             "prove", 4),
    Property("handshake_replay_cache", "replay cache read data o: valid and payload held until ready",
             "hw/accel/replay_cache.py", "ReplayCache",
             lambda cls: StreamHandshake(cls(1, 3, 3, 2), inputs=["i"], outputs=["o"]), "prove", 4),
    Property("handshake_packet_arbiter", "packet arbiter o: valid and payload held until ready",
             "hw/lib/packet_arbiter.py", "PacketArbiter",
             lambda cls: StreamHandshake(_arbiter(cls), inputs=["i"], outputs=["o"]), "prove", 4),
    Property("handshake_accelerator", "accelerator y (tiny config): valid and payload held until "
             "ready, with the host's group contract", "hw/accel/accelerator.py", "Accelerator",
             lambda cls: StreamHandshake(cls(TINY_ACCEL), inputs=["x"], outputs=["y"],
                                         assume=assume_groups), "bmc", 32, deep=60),
    Property("handshake_accelerator_v2", "v2 accelerator y (tiny v2 config): valid and payload held "
             "until ready, with the host's group contract", "hw/accel/accelerator_v2.py", "AcceleratorV2",
             lambda cls: HandshakeAcceleratorV2(cls(TINY_V2)), "bmc", 32, deep=80),
    # --- work conservation, order, memory -----------------------------------------------------
    Property("dispatcher_drs", "DRS: every row's chunks dispatched exactly once, in order, no idling",
             "hw/accel/dispatcher.py", "Dispatcher",
             lambda cls: DispatcherWork(static=False, dut_class=cls), "prove", 8),
    Property("dispatcher_chunk_rr", "chunk round-robin: every row's chunks exactly once, in order, "
             "chunk j on core j mod cores, no idling", "hw/accel/dispatcher.py", "Dispatcher",
             lambda cls: DispatcherWork(static=False, chunk_rr=True, dut_class=cls), "prove", 8),
    Property("dispatcher_static", "static: every row's chunks exactly once, on core tag mod cores",
             "hw/accel/dispatcher.py", "Dispatcher",
             lambda cls: DispatcherWork(static=True, dut_class=cls), "prove", 8),
    Property("reorder_buffer_order", "reorder buffer: emits in sequence order, no gaps, no duplicates",
             "hw/lib/reorder_buffer.py", "ReorderBuffer",
             lambda cls: ReorderBufferOrder(dut_class=cls), "prove", 8),
    Property("replay_cache_memory", "replay cache: addresses in range; each entry reads back its "
             "last write", "hw/accel/replay_cache.py", "ReplayCache",
             lambda cls: ReplayCacheMemory(dut_class=cls), "bmc", 24),
    Property("packet_arbiter_merge", "packet arbiter: one beat in per beat out, payload unchanged, "
             "packets not interleaved, valid held", "hw/lib/packet_arbiter.py", "PacketArbiter",
             lambda cls: PacketArbiterMerge(dut_class=cls), "prove", 4),
    Property("row_out_rows", "v2 output stage (tiny v2 config, two cores): every complete row leaves "
             "on o exactly once and in time, never early; o holds valid and payload until ready",
             "hw/accel/row_out.py", "RowOut", lambda cls: RowOutRows(TINY_V2, dut_class=cls), "bmc", 26),
    Property("weight_store_memory", "v2 weight store (two lanes of two banks): a read on either port "
             "returns the block last written at its address, WeightStore.latency cycles later",
             "hw/accel/weight_store.py", "WeightStore", lambda cls: WeightStoreMemory(dut_class=cls),
             "bmc", 10, nomem=False),
    Property("tas_group_order", "v2 TAS group (2 engines, 2 lanes): one decision per row taken, in "
             "arrival order, with its row and TAS, none stuck; o holds valid and payload until ready",
             "hw/accel/tas_group.py", "TasGroup",
             lambda cls: TasGroupOrder(dim=TINY_V2.d_model, layers=TINY_V2.layers,
                                       tokens_per_frame=TINY_V2.tokens_per_frame, batch=TINY_V2.batch,
                                       lanes=TINY_V2.tas_lanes, dut_class=cls), "bmc", 16),
    # --- widths --------------------------------------------------------------------------------
    Property("partial_sum_width", "PE partial sum of 4 int8 products in sum_bits(4) bits never wraps",
             "sw/golden/quant.py", "sum_bits",
             lambda fn: PartialSumWidth(4, fn(4)), "prove", 1),
    Property("mv_unit_width", "v2 matrix-vector unit (4 x 2, runs of 4 beats): every adder-tree stage "
             "and accumulator holds the exact sum (int8 operands, no wrap)", "hw/accel/mv_unit.py", "MvUnit",
             lambda cls: MvUnitWidth(n_in=4, n_out=2, beats=4, dut_class=cls), "bmc", 12),
]


def by_name(name: str) -> Property:
    for p in PROPERTIES:
        if p.name == name:
            return p
    raise KeyError(f"no formal property {name!r}; known: {[p.name for p in PROPERTIES]}")
