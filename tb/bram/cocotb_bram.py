"""cocotb: the hand-instantiated DP16KD (with its output register) against Bram's model, cycle by
cycle, and both against a reference in Python.

The DP16KD simulation model is ``DP16KD.v`` here: Yosys's ``cells_sim.v`` only declares DP16KD as
a black box, with no behaviour to simulate.
"""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from hw.lib.bram import BramReference
from tb.runner import bench_config


def init_words(width: int, depth: int) -> list[int]:
    """Initial contents: random words everywhere except the last three addresses (left 0)."""
    rng = random.Random(width * 100_003 + depth)
    return [rng.getrandbits(width) for _ in range(depth - 3)]


def stimulus(width: int, depth: int, seed: int, n: int):
    """``(w_en, w_addr, w_data, r_en, r_addr, r_ce_out)`` per cycle: a read of every word with
    both enables on (the initial contents), ``n`` random cycles with random enables, half of the
    addresses from a window of 8 words so that reads meet recent writes, then a read of every
    word with the output register stalling at random. A read never meets a write of the same word
    in the same cycle (undefined on the block)."""
    rng = random.Random(seed)
    words = 1 << (depth - 1).bit_length()
    out = [(0, 0, 0, 1, a, 1) for a in range(words)]
    base = 0

    def addr():
        return (base + rng.randrange(8)) % words if rng.random() < 0.5 else rng.randrange(words)

    for i in range(n):
        if i % 64 == 0:
            base = rng.randrange(words)
        w_en, w_addr, r_en, r_addr = rng.random() < 0.5, addr(), rng.random() < 0.75, addr()
        if w_en and r_en and w_addr == r_addr:
            r_addr = (r_addr + 1) % words
        out.append((int(w_en), w_addr, rng.getrandbits(width), int(r_en), r_addr,
                    int(rng.random() < 0.75)))
    out += [(0, 0, 0, 1, a, int(rng.random() < 0.7)) for a in range(words)]
    # Drain: whatever is still in flight reaches r_data.
    out += [(0, 0, 0, 1, 0, 1)] * 2
    return out


async def check_pair(dut, prefix: str, width: int, depth: int, seed: int, n: int) -> int:
    """Drive one pair (ports ``<prefix>_*``) and check it on every cycle; returns the cycles checked."""
    def port(name):
        return getattr(dut, f"{prefix}_{name}")

    ref = BramReference(width, depth, init_words(width, depth))
    checked = 0
    # Inputs change at falling edges; after falling edge j, r_data shows the rising edge before
    # it, which the reference applies first.
    for i, step in enumerate(stimulus(width, depth, seed, n)):
        await FallingEdge(dut.clk)
        model, ebr = port("r_data_model").value, port("r_data_ebr").value
        where = f"{width}x{depth}, cycle {i}"
        assert model.is_resolvable and ebr.is_resolvable, f"{where}: model {model}, DP16KD {ebr}"
        model, ebr = int(model), int(ebr)
        assert model == ebr, f"{where}: model {model:#x} != DP16KD {ebr:#x}"
        assert ebr == ref.r_data, f"{where}: r_data {ebr:#x}, expected {ref.r_data:#x}"
        checked += 1
        for name, v in zip(("w_en", "w_addr", "w_data", "r_en", "r_addr", "r_ce_out"), step, strict=True):
            port(name).value = v
        ref.edge(*step)
    return checked


@cocotb.test()
async def model_equals_primitive(dut):
    """Every pair: model and DP16KD equal on every cycle, and equal to the reference (latency 2)."""
    bench = bench_config()
    configs, seed = bench.bram, bench.seed
    for i in range(len(configs)):
        for name in ("w_en", "w_addr", "w_data", "r_en", "r_addr", "r_ce_out"):
            getattr(dut, f"c{i}_{name}").value = 0
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    tasks = [cocotb.start_soon(check_pair(dut, f"c{i}", w, d, seed + i, 4000))
             for i, (w, d) in enumerate(configs)]
    for (w, d), task in zip(configs, tasks, strict=True):
        checked = await task
        dut._log.info("%dx%d: %d cycles equal in the model, the DP16KD and the reference", w, d, checked)
