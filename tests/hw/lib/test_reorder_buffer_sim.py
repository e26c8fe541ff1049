"""The reorder buffer emits in sequence order, with no gaps and no duplicates, under random
completion order and backpressure."""

import numpy as np
import pytest
from amaranth.hdl import unsigned
from amaranth.sim import Simulator

from hw.lib.reorder_buffer import ReorderBuffer


def _run(depth, seed, *, eligible, ready_p, n=200, bound=None, select_bits=None):
    """``n`` results through a ``ReorderBuffer(depth)``: a producer offers, at random, one of the
    pending sequence numbers that ``eligible(s, out, pending)`` allows (``out``: results taken so
    far) and holds it until ``i.ready``; a consumer takes ``o`` with probability ``ready_p`` per
    cycle. Returns the payloads taken and the cycles the producer waited on ``i.ready``.
    ``bound``: simulated cycles to stop at (None: until the consumer has all ``n``)."""
    dut = ReorderBuffer(unsigned(16), depth, select_bits=select_bits)
    rng = np.random.default_rng(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got, waited = [], [0]
    state = {"out": 0}

    async def producer(ctx):
        pending = list(range(n))
        while pending:
            window = [s for s in pending if eligible(s, state["out"], pending)]
            if not window or rng.random() < 0.2:
                await ctx.tick()
                continue
            s = int(rng.choice(window))
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.p.tag, s % depth)
            ctx.set(dut.i.p.data, (s * 7919) & 0xFFFF)
            while True:
                *_, ready = await ctx.tick().sample(dut.i.ready)
                if ready:
                    break
                waited[0] += 1
            ctx.set(dut.i.valid, 0)
            pending.remove(s)

    async def consumer(ctx):
        crng = np.random.default_rng(seed + 100)
        while len(got) < n:
            ctx.set(dut.o.ready, int(crng.random() < ready_p))
            *_, valid, ready, payload = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                got.append(int(payload))
                state["out"] += 1

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    if bound is None:
        sim.run()
    else:
        sim.run_until(1e-8 * bound)
    return got, waited[0]


def _want(n=200):
    return [(s * 7919) & 0xFFFF for s in range(n)]


@pytest.mark.parametrize("depth,seed,select_bits", [(4, 0, None), (8, 1, None), (8, 2, None), (4, 5, 5),
                                                    (8, 6, 16)])
def test_in_order_under_shuffle(depth, seed, select_bits):
    # any sequence number within depth of the next one to leave may finish now; with
    # ``select_bits`` the output row is selected by several copies of the head (5: groups of
    # 5, 5, 5 and 1 bits)
    got, _ = _run(depth, seed, ready_p=0.6, select_bits=select_bits,
                  eligible=lambda s, out, pending: s < out + depth and pending.index(s) < depth)
    assert got == _want()


@pytest.mark.parametrize("depth,seed", [(4, 3), (8, 4)])
def test_a_result_for_an_occupied_slot_waits(depth, seed):
    """An eager producer offers results up to two windows ahead, so a result often meets its slot
    still held by the one ``depth`` before it: the buffer must refuse it (``i.ready`` low) until
    that one has left, and the order out stays exact. (Offered only once everything up to the
    slot's holder is in, so that the holder can always leave.)"""
    n = 200
    got, waited = _run(depth, seed, ready_p=0.4, n=n, bound=40 * n,     # bounded: a lost result would hang
                       eligible=lambda s, out, pending: s < out + 2 * depth
                       and all(t not in pending for t in range(s - depth + 1)))
    assert waited > 0, "no result met an occupied slot: the test did not test the refusal"
    assert got == _want(n), f"{len(got)} of {n} results out, or out of order"


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_bad_select_bits_is_refused(bad):
    with pytest.raises(ValueError, match="select_bits"):
        ReorderBuffer(unsigned(16), 4, select_bits=bad)
