"""Packet arbiter + reducer: partial sums from several producers, interleaved chunk by chunk,
add up per row and requantise exactly as sw.golden.quant; no packet is split or lost."""

import numpy as np
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.accel.mlp_core import partial_layout
from hw.accel.payload import pack, rq_words, unpack_int8
from hw.accel.reducer import Reducer
from hw.lib.packet_arbiter import PacketArbiter
from sw.config import TileConfig
from sw.golden import quant
from tests.streams import load_words


def test_reducer_sums_chunks_of_interleaved_rows():
    d, cols, layers, chunks, tags, P = 12, 4, 2, 3, 4, 3
    nt = d // cols
    rng = np.random.default_rng(3)
    red = Reducer(d, cols, layers=layers, chunks=chunks, tags=tags)
    arb = PacketArbiter(partial_layout(cols, nt, layers, 2), P)
    m = Module()
    m.submodules.red, m.submodules.arb = red, arb
    wiring.connect(m, arb.o, red.i)
    mult = rng.integers(20000, 60000, (layers, d))
    shift = rng.integers(31, 34, (layers, d))
    t = TileConfig(rows=1, cols=cols, k_dim=1, n_dim=d)
    words = sum((rq_words(mult[n], shift[n], t, bank=n, banks=layers) for n in range(layers)), [])
    # Rounds of `tags` rows; each row gets `chunks` partials spread over the producers.
    rounds = 3
    rows = [(r, tag, int(rng.integers(0, layers))) for r in range(rounds) for tag in range(tags)]
    parts = {(r, tag): rng.integers(-2**24, 2**24, (chunks, d)) for r, tag, _ in rows}
    queues = [[] for _ in range(P)]
    for r, tag, layer in rows:
        for j in range(chunks):
            queues[int(rng.integers(0, P))].append((r, tag, layer, j))
    got = []
    sim = Simulator(m)
    sim.add_clock(1e-8)
    lay = partial_layout(cols, nt, layers, 2)

    def producer(p):
        async def run(ctx):
            await ctx.tick().repeat(len(words) + 2)
            prng = np.random.default_rng(10 + p)
            for r, tag, layer, j in queues[p]:
                # A tag is reused only after its row has left (the accelerator finishes a group
                # before it starts the next one).
                while len(got) < tags * r:
                    await ctx.tick()
                for s in range(nt):
                    while prng.random() < 0.3:
                        await ctx.tick()
                    ctx.set(arb.i[p].valid, 1)
                    ctx.set(arb.i[p].payload.as_value(), pack(lay, {
                        "acc": [int(v) for v in parts[r, tag][j, s * cols:(s + 1) * cols]],
                        "nt": s, "last": int(s == nt - 1), "layer": layer, "tag": tag}))
                    await ctx.tick().until(arb.i[p].ready)
                    ctx.set(arb.i[p].valid, 0)
        return run

    async def loader(ctx):
        await load_words(ctx, red.rq, words)

    async def consumer(ctx):
        crng = np.random.default_rng(7)
        for _ in range(len(rows)):
            while crng.random() < 0.4:
                await ctx.tick()
            ctx.set(red.o.ready, 1)
            y, tag = await ctx.tick().sample(red.o.p.y.as_value(), red.o.p.tag).until(red.o.valid)
            ctx.set(red.o.ready, 0)
            got.append((int(tag), unpack_int8(y, d)))

    sim.add_testbench(loader)
    for p in range(P):
        sim.add_testbench(producer(p))
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * (len(words) + len(rows) * chunks * nt * 6 + 200))
    want = {}
    for r, tag, layer in rows:
        y = quant.requantize(parts[r, tag].sum(axis=0), mult[layer], shift[layer])
        want.setdefault(tag, []).append(y)
    assert len(got) == len(rows), f"{len(got)} rows out for {len(rows)} in"
    for tag in range(tags):
        mine = [y for t_, y in got if t_ == tag]
        assert len(mine) == rounds
        assert sorted(map(bytes, mine)) == sorted(bytes(np.asarray(y, np.int8)) for y in want[tag])
