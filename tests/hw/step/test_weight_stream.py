"""The decode step's weight reader in amaranth.sim with a small AXI4 memory model: for steps with and
without sampling, every beat on every stream (n1, w, wo, n2 per layer; nf and the head once per prompt
per sampling step) equals the blocks and constants packed by ``pack_blocks`` / ``pack_channels``,
under memory latency, pauses and backpressure; the image's sizes equal the byte formula of
``sw.perf.rtl_step``; the check is shown to fail on a wrong word."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.channel_join import channel_layout
from hw.step.row_runs import weight_layout
from hw.step.weight_stream import (
    WeightStream,
    channel_words,
    head_words,
    layer_words,
    pack_blocks,
    pack_channels,
)
from sw.spec import quant

D, L, PR, C, NI, NO, NB = 16, 2, 2, 8, 4, 4, 8
BASE = 0x1000 - 40          # the first layer's image crosses a 4 KB boundary


def model(rng):
    """Random weights and constants, the memory image and each stream's expected beats."""
    def chan():
        return rng.integers(0, 1 << quant.MULT_BITS, D), rng.integers(0, 1 << quant.SHIFT_BITS, D)

    def proj(d_out):
        return (rng.integers(-128, 128, (D, d_out)), rng.integers(0, 1 << quant.MULT_BITS, d_out),
                rng.integers(0, 1 << quant.SHIFT_BITS, d_out))

    layers = [dict(n1=chan(), qkv=[proj(D) for _ in range(3)], o=proj(D), n2=chan()) for _ in range(L)]
    nf, head = chan(), proj(C)
    image = b""
    for ly in layers:
        image += pack_channels(*ly["n1"]) + b"".join(pack_blocks(*p, NI, NO) for p in ly["qkv"])
        image += pack_blocks(*ly["o"], NI, NO) + pack_channels(*ly["n2"])
    image += pack_channels(*nf) + pack_blocks(*head, NI, NO)
    assert len(image) == (L * layer_words(D, NI, NO) + channel_words(D) + head_words(D, C, NI, NO)) * NB

    wl = weight_layout(NI, NO)

    def beats(w, mult, shift):
        out = []
        for j in range(w.shape[1] // NO):
            c = 0
            for n in range(NO):
                c |= int(mult[j * NO + n]) << (quant.MULT_BITS * n)
                c |= int(shift[j * NO + n]) << (quant.MULT_BITS * NO + quant.SHIFT_BITS * n)
            for k in range(D // NI):
                blk = np.ascontiguousarray(w[k * NI:(k + 1) * NI, j * NO:(j + 1) * NO].astype(np.int8).T)
                out.append(int.from_bytes(blk.tobytes(), "little") | c << (NI * NO * 8))
        assert all(b < 1 << wl.size for b in out)
        return out

    def chans(mult, shift):
        return [int(m) | int(s) << quant.MULT_BITS for m, s in zip(mult, shift, strict=True)]

    return image, layers, nf, head, beats, chans


def expected(samples, layers, nf, head, beats, chans):
    want = {k: [] for k in ("n1", "w", "wo", "n2", "nf", "hw")}
    for s in samples:
        for ly in layers:
            want["n1"] += chans(*ly["n1"])
            want["w"] += [b for p in ly["qkv"] for b in beats(*p)]
            want["wo"] += beats(*ly["o"])
            want["n2"] += chans(*ly["n2"])
        if s:
            want["nf"] += chans(*nf)
            for _ in range(PR):
                want["hw"] += beats(*head)
    return want


def run(samples, image, *, stall=0.0, latency=4, seed=0, max_steps=20000):
    dut = WeightStream(D, L, PR, C, NI, NO, max_burst=8, depth=16)
    rng = np.random.default_rng(seed)
    mem = bytearray(BASE) + bytearray(image)
    got = {k: [] for k in ("n1", "w", "wo", "n2", "nf", "hw")}

    async def tb(ctx):
        k = 0
        queue, beat, idle = [], 0, 0
        rd = dut.rd
        ctx.set(dut.base, BASE)
        for cycle in range(max_steps):
            ctx.set(dut.i.valid, int(k < len(samples)))
            if k < len(samples):
                ctx.set(dut.i.p.sample, samples[k])
            ctx.set(rd.arready, int(rng.random() >= stall))
            rvalid = bool(queue) and queue[0][0] <= cycle and rng.random() >= stall
            ctx.set(rd.rvalid, int(rvalid))
            if rvalid:
                _, a, n = queue[0]
                ctx.set(rd.rdata, int.from_bytes(mem[a + beat * NB:a + (beat + 1) * NB], "little"))
                ctx.set(rd.rlast, int(beat == n - 1))
                ctx.set(rd.rresp, 0)
            ready = {name: rng.random() >= stall for name in got}
            for name, r in ready.items():
                ctx.set(getattr(dut, name).ready, int(r))
            await ctx.delay(1e-9)
            if k < len(samples) and ctx.get(dut.i.ready):
                k += 1
            if ctx.get(rd.arvalid) and ctx.get(rd.arready):
                queue.append((cycle + latency, ctx.get(rd.araddr), ctx.get(rd.arlen) + 1))
            if rvalid and ctx.get(rd.rready):
                beat += 1
                if beat == queue[0][2]:
                    queue.pop(0)
                    beat = 0
            moved = False
            for name, r in ready.items():
                s = getattr(dut, name)
                if r and ctx.get(s.valid):
                    got[name].append(ctx.get(s.payload.as_value()))
                    moved = True
            idle = 0 if moved or queue else idle + 1
            await ctx.tick()
            if k == len(samples) and idle > 200:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return got


model_cache = None


@pytest.fixture(scope="module")
def weights():
    global model_cache
    image, layers, nf, head, beats, chans = model(np.random.default_rng(5))
    model_cache = (layers, nf, head, beats, chans)
    return image


@pytest.mark.parametrize("stall", [0.0, 0.4])
def test_every_beat_on_its_stream(weights, stall):
    samples = [0, 1, 1, 0]
    got = run(samples, weights, stall=stall, seed=3)
    want = expected(samples, *model_cache)
    for name in want:
        n_got, n_want = len(got[name]), len(want[name])
        assert n_got == n_want, f"{name}: {n_got} beats, expected {n_want}"
        bad = [n for n, (a, b) in enumerate(zip(got[name], want[name], strict=True)) if a != b]
        assert not bad, f"{name}: beat {bad[0]} differs"


def test_a_wrong_word_is_caught(weights):
    image = bytearray(weights)
    image[(layer_words(D, NI, NO) + channel_words(D) + 3) * NB] ^= 1    # the second layer's first q block
    got = run([0], bytes(image))
    want = expected([0], *model_cache)
    assert got["n1"] == want["n1"] and got["w"] != want["w"]


def test_layouts_fit_the_slots():
    assert channel_layout().size <= 32
    assert weight_layout(NI, NO).size == NI * NO * 8 + NO * (quant.MULT_BITS + quant.SHIFT_BITS)


def test_bad_parameters():
    for kw, name in (({"d_model": 15}, "d_model"), ({"codebook": 6}, "codebook"),
                     ({"data_width": 16}, "data_width"), ({"layers": 0}, "layers")):
        args = dict(d_model=D, layers=L, prompts=PR, codebook=C, n_in=NI, n_out=NO) | kw
        with pytest.raises(ValueError, match=name):
            WeightStream(**args)
