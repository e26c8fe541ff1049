"""The noise lane against sw.spec.quant.noise_int: every leading-one position, the table corners,
random words, one per cycle and with idle cycles, fixed latency."""

import numpy as np
import pytest

from hw.step.noise_lane import NOISE_BITS, NoiseLane
from sw.spec import quant
from tests.lanes import run_lane


def words(seed=3):
    w = [0, 1, 2, 3, 127, 128, 255, 256, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    w += [(1 << k) - 1 for k in range(1, 33)] + [1 << k for k in range(32)]
    w += [((1 << k) | (0x5A5A5A5A & ((1 << k) - 1))) for k in range(32)]
    rng = np.random.default_rng(seed)
    return w + [int(x) for x in rng.integers(0, 2**32, size=300)]


def run(ws, gaps=None):
    dut = NoiseLane(tag_bits=10)

    def set_item(ctx, r, k):
        ctx.set(dut.i.p.r, r)
        ctx.set(dut.i.p.tag, k % 1024)

    return run_lane(dut, ws, set_item, lambda ctx: (ctx.get(dut.o.p.noise), ctx.get(dut.o.p.tag)), gaps)


@pytest.mark.parametrize("gaps", [None, [0, 1, 1, 0, 1]])
def test_noise_lane_is_the_spec(gaps):
    ws = words()
    want = quant.noise_int(ws)
    sent, got = run(ws, gaps)
    assert len(got) == len(ws)
    for k, (cycle, y, tag) in enumerate(got):
        assert tag == k % 1024 and cycle - sent[k] == NoiseLane.latency
        assert y == want[k], f"word {ws[k]:#010x}: RTL {y}, spec {want[k]}"
    assert -(1 << (NOISE_BITS - 1)) <= want.min() and want.max() < (1 << (NOISE_BITS - 1))
    # The comparison can fail: the same words through a table with one entry changed differ.
    log2_t, g_t = quant.noise_tables()
    g_bad = g_t.copy()
    g_bad[255] += 1
    assert (quant.noise_int(ws, (log2_t, g_bad)) != want).any()


def test_noise_range_over_every_case():
    from sw.golden.sampling import noise_atoms

    v, _ = noise_atoms()
    assert -(1 << (NOISE_BITS - 1)) <= v.min() and v.max() < (1 << (NOISE_BITS - 1))
    assert v.max() > 1 << (NOISE_BITS - 2)                  # the width is needed


def test_bad_tag_bits():
    with pytest.raises(ValueError, match="tag_bits"):
        NoiseLane(tag_bits=-1)
