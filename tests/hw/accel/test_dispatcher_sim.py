"""DRS dispatcher stress test: random rows, random core readiness; every chunk of every row is
dispatched exactly once, the static mode keeps row b on core b mod P, and chunk round-robin
sends chunk j of every row to core j mod P."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.dispatcher import Dispatcher, row_job_layout
from hw.lib.payload import pack
from tests.streams import stream_put


def run(static, *, chunk_rr=0, cores=3, chunks=4, rows=40, seed=0, busy_p=0.6, dut_class=Dispatcher):
    layers, tag_bits = 2, 3
    dut = dut_class(layers=layers, chunks=chunks, cores=cores, tag_bits=tag_bits)
    rng = np.random.default_rng(seed)
    jobs = [(int(rng.integers(0, layers)), int(rng.integers(0, 8))) for _ in range(rows)]
    got = []      # (core, tag, layer, chunk)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def producer(ctx):
        ctx.set(dut.static, static)
        ctx.set(dut.chunk_rr, chunk_rr)
        for layer, tag in jobs:
            await stream_put(ctx, dut.i, pack(row_job_layout(layers, tag_bits), {"layer": layer, "tag": tag}))

    async def cores_tb(ctx):
        crng = np.random.default_rng(seed + 1)
        for _ in range(rows * chunks * cores * 8):
            ready = [int(crng.random() > busy_p) for _ in range(cores)]
            for p in range(cores):
                ctx.set(dut.o[p].ready, ready[p])
            await ctx.delay(1e-9)
            for p in range(cores):
                o = dut.o[p]
                if ctx.get(o.valid) and ready[p]:
                    got.append((p, ctx.get(o.p.tag), ctx.get(o.p.layer), ctx.get(o.p.chunk)))
                elif ctx.get(o.valid) and not static:
                    got.append(("valid without ready", p))
            await ctx.tick()

    sim.add_testbench(producer)
    sim.add_testbench(cores_tb)
    sim.run()
    return jobs, got


def check(jobs, got, *, static, chunk_rr, cores, chunks):
    """Every chunk of every row once, in order, with its payload, on the mode's core."""
    assert not [c for c in got if c[0] == "valid without ready"], "DRS/chunk-RR raised valid without ready"
    assert len(got) == len(jobs) * chunks, f"{len(got)} chunks dispatched for {len(jobs)} rows"
    # DRS and chunk-RR hand out one row at a time, in order; static keeps each core's rows in order.
    streams = [(list(range(len(jobs))), got)] if not static else [
        ([n for n, j in enumerate(jobs) if j[1] % cores == p], [c for c in got if c[0] == p])
        for p in range(cores)]
    for rows, seq in streams:
        assert len(seq) == len(rows) * chunks, f"{len(seq)} chunks for {len(rows)} rows"
        for k, n in enumerate(rows):
            layer, tag = jobs[n]
            mine = seq[k * chunks:(k + 1) * chunks]
            assert [c for _, _, _, c in mine] == list(range(chunks)), f"row {n}: chunk order {mine}"
            for p, t, lay, c in mine:
                assert (t, lay) == (tag, layer), f"row {n}: wrong payload"
                if static:
                    assert p == tag % cores, f"static: row with tag {tag} went to core {p}"
                elif chunk_rr:
                    assert p == c % cores, f"chunk-RR: row {n}'s chunk {c} went to core {p}"
    if not static:
        assert len({p for p, *_ in got}) == cores, "DRS never used some core"


@pytest.mark.parametrize("static", [0, 1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_chunk_exactly_once(static, seed):
    cores, chunks = 3, 4
    jobs, got = run(static, cores=cores, chunks=chunks, seed=seed)
    check(jobs, got, static=static, chunk_rr=0, cores=cores, chunks=chunks)


@pytest.mark.parametrize("cores,chunks", [(3, 4), (2, 8), (2, 3)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunk_round_robin(cores, chunks, seed):
    """Chunk round-robin under random readiness: chunk j of every row on core j mod P, each once, in
    order (the dispatcher waits for that core, never sending valid without its ready)."""
    jobs, got = run(0, chunk_rr=1, cores=cores, chunks=chunks, seed=seed)
    check(jobs, got, static=0, chunk_rr=1, cores=cores, chunks=chunks)


@pytest.mark.parametrize("seed", [0, 1])
def test_chunk_rr_ignored_in_static_mode(seed):
    """With ``static = 1`` the ``chunk_rr`` input changes nothing: row b stays on core b mod P."""
    cores, chunks = 3, 4
    jobs, got = run(1, chunk_rr=1, cores=cores, chunks=chunks, seed=seed)
    check(jobs, got, static=1, chunk_rr=0, cores=cores, chunks=chunks)


def test_drs_is_not_round_robin():
    """The chunk-RR check can fail: DRS under random readiness breaks chunk j -> core j mod P."""
    cores, chunks = 3, 4
    jobs, got = run(0, chunk_rr=0, cores=cores, chunks=chunks, seed=0)
    with pytest.raises(AssertionError, match="chunk-RR: row"):
        check(jobs, got, static=0, chunk_rr=1, cores=cores, chunks=chunks)
