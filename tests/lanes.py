"""Driving a fixed-latency lane (always-ready input and output, a tag beside each value) in
amaranth.sim: one item a cycle, or with idle cycles."""

from amaranth.sim import Simulator


def run_lane(dut, items, set_item, get_out, gaps=None):
    """Feed ``items`` to ``dut.i`` (``set_item(ctx, item, k)`` sets its payload) one per cycle,
    idle where ``gaps[cycle % len(gaps)]`` is true, and collect ``[(cycle_out, *get_out(ctx))]``
    while ``dut.o.valid``; returns ``(cycles_in, outputs)``."""
    sent, got = [], []

    async def bench(ctx):
        cycle, pending = 0, list(enumerate(items))
        while pending or len(got) < len(items):
            if pending and not (gaps and gaps[cycle % len(gaps)]):
                k, item = pending.pop(0)
                ctx.set(dut.i.valid, 1)
                set_item(ctx, item, k)
                sent.append(cycle)
            else:
                ctx.set(dut.i.valid, 0)
            if ctx.get(dut.o.valid):
                got.append((cycle, *get_out(ctx)))
            await ctx.tick()
            cycle += 1
            assert cycle < 10 * len(items) + 50, "the lane stopped producing"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return sent, got
