"""cocotb: BramTdp's DP16KD instance in true dual-port mode (port A reads or writes, port B reads,
OUTREG on both) against its model, cycle by cycle, and both against :class:`hw.lib.bram.BramTdpReference`.
The DP16KD simulation model is ``DP16KD.v`` here."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from hw.lib.bram import BramTdpReference
from tb.bram.cocotb_bram import init_words
from tb.runner import bench_config

PORTS = ("a_we", "a_addr", "a_wdata", "b_addr")
#: Idle cycles first, not checked: the ports have no enables, so a rising edge at time 0 (which
#: the simulators may or may not see) reads; after two idle edges everything is known.
WARMUP = 2


def tdp_stimulus(width: int, depth: int, seed: int, n: int):
    """``(a_we, a_addr, a_wdata, b_addr)`` per cycle: :data:`WARMUP` idle cycles, both ports read
    every word (the initial contents), ``n`` random cycles (writes on port A 40 % of the time, in
    runs of 90 % every 500 cycles; half of the addresses from a window of 8 words so that reads
    meet recent writes), then both ports read every word again. Port B never reads the word port
    A writes in the same cycle."""
    rng = random.Random(seed)
    words = 1 << (depth - 1).bit_length()
    out = [(0, 0, 0, 0)] * WARMUP + [(0, a, 0, words - 1 - a) for a in range(words)]
    base = 0

    def addr():
        return (base + rng.randrange(8)) % words if rng.random() < 0.5 else rng.randrange(words)

    for i in range(n):
        if i % 64 == 0:
            base = rng.randrange(words)
        a_we = rng.random() < (0.9 if (i // 100) % 5 == 4 else 0.4)
        a_addr, b_addr = addr(), addr()
        if a_we and a_addr == b_addr:
            b_addr = (b_addr + 1) % words
        out.append((int(a_we), a_addr, rng.getrandbits(width), b_addr))
    out += [(0, a, 0, (a * 7) % words) for a in range(words)]
    out += [(0, 0, 0, 0)] * 2
    return out


async def check_pair(dut, prefix: str, width: int, depth: int, seed: int, n: int) -> int:
    """Drive one pair (ports ``<prefix>_*``) and check both read ports on every cycle."""
    def port(name):
        return getattr(dut, f"{prefix}_{name}")

    ref = BramTdpReference(width, depth, init_words(width, depth))
    checked = 0
    for i, step in enumerate(tdp_stimulus(width, depth, seed, n)):
        await FallingEdge(dut.clk)
        if i < WARMUP:
            for name, v in zip(PORTS, step, strict=True):
                port(name).value = v
            ref.edge(*step)
            continue
        where = f"{width}x{depth}, cycle {i}"
        for p, want in (("a", ref.a_rdata), ("b", ref.b_rdata)):
            model, ebr = port(f"{p}_rdata_model").value, port(f"{p}_rdata_ebr").value
            assert model.is_resolvable and ebr.is_resolvable, f"{where}: port {p} model {model}, DP16KD {ebr}"
            model, ebr = int(model), int(ebr)
            assert model == ebr, f"{where}: port {p} model {model:#x} != DP16KD {ebr:#x}"
            assert ebr == want, f"{where}: port {p} {ebr:#x}, expected {want:#x}"
        checked += 1
        for name, v in zip(PORTS, step, strict=True):
            port(name).value = v
        ref.edge(*step)
    return checked


@cocotb.test()
async def tdp_model_equals_primitive(dut):
    """Every pair: model and DP16KD equal on both ports on every cycle, and equal to the reference."""
    bench = bench_config()
    configs, seed = bench.bram, bench.seed
    for i in range(len(configs)):
        for name in PORTS:
            getattr(dut, f"c{i}_{name}").value = 0
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    tasks = [cocotb.start_soon(check_pair(dut, f"c{i}", w, d, seed + i, 4000))
             for i, (w, d) in enumerate(configs)]
    for (w, d), task in zip(configs, tasks, strict=True):
        checked = await task
        dut._log.info("%dx%d: %d cycles equal on both ports in the model, the DP16KD and the reference",
                      w, d, checked)
