"""Formal properties (hw/formal/properties.py) through SymbiYosys, each with a failing twin: the
same check on a copy of the block with a planted bug (tb/mutants.py) must find a counterexample
that names the expected assertion."""

import pytest

from hw.formal.properties import PROPERTIES, by_name
from tb.formal import check
from tb.mutants import by_name as mutant

pytestmark = pytest.mark.usefixtures("formal_tools")


@pytest.mark.parametrize("prop", [p for p in PROPERTIES if p.holds], ids=lambda p: p.name)
def test_property(prop, request):
    """The property holds; with ``--formal-deep``, at its longer depth where it has one (minutes)."""
    deep = request.config.getoption("--formal-deep")
    depth = prop.deep if deep and prop.deep else prop.depth
    result = check(prop.wrapper(), prop.name, mode=prop.mode, depth=depth, timeout=3600, nomem=prop.nomem)
    assert result.passed, result.summary()


#: (property, planted bug, words of the assertion that must fail)
TWINS = [
    ("handshake_dispatcher", "dispatcher-static-no-hold", "valid and payload held until ready"),
    ("handshake_reorder_buffer", "rob-slot-loads-when-full", "valid and payload held until ready"),
    ("handshake_replay_cache", "cache-read-no-hold", "valid and payload held until ready"),
    ("dispatcher_drs", "dispatcher-last-chunk", "busy exactly while chunks are owed"),
    ("dispatcher_drs", "dispatcher-drs-skips-last-core", "goes out when a core is ready"),
    ("dispatcher_chunk_rr", "dispatcher-chunk-rr-wrong-core", ""),
    ("dispatcher_chunk_rr", "dispatcher-last-chunk", "busy exactly while chunks are owed"),
    ("dispatcher_static", "dispatcher-static-wrong-core", ""),
    ("dispatcher_static", "dispatcher-last-chunk", "busy exactly while chunks are owed"),
    ("reorder_buffer_order", "rob-head-skips", ""),
    ("replay_cache_memory", "cache-address-alias", "returns the value last written"),
    ("replay_cache_memory", "cache-address-range", "address in range"),
    ("replay_cache_memory", "cache-position-low-bits", "returns the value last written"),
    ("replay_cache_memory", "cache-write-disabled", "returns the value last written"),
    ("row_out_rows", "row-out-one-finish-per-cycle", "a complete row leaves on o in time (no row lost)"),
    ("row_out_rows", "row-out-drops-second-finish", "a complete row leaves on o in time (no row lost)"),
    ("row_out_rows", "row-out-early-full", "a row leaves only once all its chunks are done"),
    ("weight_store_memory", "weight-store-write-bank", "returns the block last written"),
    ("weight_store_memory", "weight-store-read-bank", "port B returns the block last written"),
    ("tas_group_order", "tas-group-tas-of-row-0", "the n-th decision carries the n-th row's TAS"),
    ("tas_group_order", "tas-group-queue-drops", "a row's decision is given in time"),
    ("mv_unit_width", "mv-unit-tree-narrow", "adder-tree level 0 never wraps"),
    ("handshake_accelerator", "accel-y-no-hold", "valid and payload held until ready"),
]


@pytest.mark.parametrize("prop_name,bug,message", TWINS, ids=[f"{p}-{b}" for p, b, _ in TWINS])
def test_twin_fails(prop_name, bug, message):
    prop, mu = by_name(prop_name), mutant(bug)
    assert mu.mutation.path == prop.source, f"{bug} changes {mu.mutation.path}, not {prop.source}"
    planted = getattr(mu.mutation.load(), prop.member)
    result = check(prop.wrapper(planted), f"{prop.name}__{bug}", mode=prop.mode, depth=prop.depth,
                   nomem=prop.nomem)
    assert result.failed_assertion, f"the planted bug {bug!r} went unnoticed: {result.summary()}"
    assert any(message in f for f in result.failed), f"expected '{message}': {result.summary()}"


@pytest.mark.parametrize("prop", [p for p in PROPERTIES if p.holds], ids=lambda p: p.name)
def test_cover(prop):
    """The assumptions leave the interesting behaviour reachable (a proof is not vacuous)."""
    wrapper = prop.wrapper()
    result = check(wrapper, f"{prop.name}__cover", mode="cover", depth=COVER_DEPTH.get(prop.name, 12),
                   nomem=prop.nomem)
    assert result.passed, result.summary()


#: Cycles needed to reach every cover statement (default 12).
COVER_DEPTH = {"reorder_buffer_order": 16, "row_out_rows": 26, "tas_group_order": 28,
               "handshake_accelerator": 22}
