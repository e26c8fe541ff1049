"""The formal properties of the project, each on a small but representative parameterisation.

A :class:`Property` names the block it checks (source file and class) and builds its property
wrapper from that class, so that a failing twin test can build the same wrapper around a copy of
the block with a planted bug. ``tests/formal/test_properties.py`` runs them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amaranth.hdl import unsigned

from hw.formal.accelerator import HandshakeAccelerator
from hw.formal.dispatcher import DispatcherWork
from hw.formal.handshake import StreamHandshake
from hw.formal.mv_unit import MvUnitWidth
from hw.formal.reorder_buffer import ReorderBufferOrder
from hw.formal.replay_cache import ReplayCacheMemory
from hw.formal.row_out import RowOutRows
from hw.formal.tas_group import TasGroupOrder
from hw.formal.weight_store import WeightStoreMemory

__all__ = ["Property", "PROPERTIES", "TINY_ACCEL", "by_name"]


def _tiny_accel():
    from sw.config import AccelConfig

    # The smallest accelerator with two cores, two chunks per row and two rows per group and the
    # whole dataflow (TAS, cache, dispatcher, cores, output stage, reorder buffer): the
    # matrix-vector unit takes 2 x 1 blocks (mv_in even for the weight store), a D pass lasts
    # 2 x 2 blocks (at least MvCore's ACC_WRITE_DISTANCE), two chain counters per TAS engine.
    return AccelConfig(d_model=2, d_ff=8, layers=1, tokens_per_frame=2, batch=2, cores=2, chunks=2,
                       tas_lanes=2, mv_in=2, mv_out=1)


TINY_ACCEL = _tiny_accel()


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
        A longer BMC depth for the deep run (``pytest tests/formal --formal-deep``).
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
    return cls(layers=2, chunks=3, cores=3, tag_bits=2)


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
             lambda cls: StreamHandshake(cls(1, 3, 3, 2), inputs=["i"], outputs=["o"]), "prove", 6),
    Property("handshake_accelerator", "accelerator y (tiny config): valid and payload held until ready, "
             "with the host's group contract", "hw/accel/accelerator.py", "Accelerator",
             lambda cls: HandshakeAccelerator(cls(TINY_ACCEL)), "bmc", 32, deep=80),
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
             lambda cls: ReplayCacheMemory(dut_class=cls), "bmc", 10),
    Property("row_out_rows", "output stage (tiny config, two cores): every complete row leaves "
             "on o exactly once and in time, never early; o holds valid and payload until ready",
             "hw/accel/row_out.py", "RowOut", lambda cls: RowOutRows(TINY_ACCEL, dut_class=cls), "bmc", 26),
    Property("weight_store_memory", "weight store (two lanes of two banks): a read on either port "
             "returns the block last written at its address, WeightStore.latency cycles later",
             "hw/accel/weight_store.py", "WeightStore", lambda cls: WeightStoreMemory(dut_class=cls),
             "bmc", 10, nomem=False),
    Property("tas_group_order", "TAS group (2 engines, 2 lanes): one decision per row taken, in "
             "arrival order, with its row and TAS, none stuck; o holds valid and payload until ready",
             "hw/accel/tas_group.py", "TasGroup",
             lambda cls: TasGroupOrder(dim=TINY_ACCEL.d_model, layers=TINY_ACCEL.layers,
                                       tokens_per_frame=TINY_ACCEL.tokens_per_frame, batch=TINY_ACCEL.batch,
                                       lanes=TINY_ACCEL.tas_lanes, dut_class=cls), "bmc", 24, deep=28),
    # --- widths --------------------------------------------------------------------------------
    Property("mv_unit_width", "matrix-vector unit (4 x 2, runs of 4 beats): every adder-tree stage "
             "and accumulator holds the exact sum (int8 operands, no wrap)", "hw/lib/mv_unit.py", "MvUnit",
             lambda cls: MvUnitWidth(n_in=4, n_out=2, beats=4, dut_class=cls), "bmc", 12),
]


def by_name(name: str) -> Property:
    for p in PROPERTIES:
        if p.name == name:
            return p
    raise KeyError(f"no formal property {name!r}; known: {[p.name for p in PROPERTIES]}")
