"""cocotb test of whole decode steps (``hw.step.decode_step.DecodeStep`` behind its AXI-Stream adapter)
against a full-step trace: the token embeddings, the KV cache and the weights' image in cocotbext-axi's
``AxiRam`` (the embeddings and the weights written there first, the keys and values only by the RTL;
:func:`memory_map`, :func:`weight_image`), each step's command (position, tokens, whether it
samples) and its per-layer descriptors (``grp``, ``mg``), the MLP's weights once on ``cfg``;
checked: every row out of every layer (``r_out``), every decision, every guided logit ``z`` and
token drawn, and at the end every key and value the RTL wrote to memory. The steps run in order, from
the first or from a later one.

Configuration (the run's :class:`sw.config.BenchConfig`, :func:`tb.runner.bench_config`): ``trace``,
``accel`` (the accelerator's config), ``steps`` (``all``, ``first:N`` or ``from:A:N``: see
:func:`step_range`), ``stall`` and ``seed`` (idle cycles on the inputs, backpressure on the rows out,
pauses on every channel of the memory), ``taps`` (the build has the ``r`` and ``z`` taps, checked),
``video`` (each image step's tokens are the ones the RTL drew after the step before, fed back on
chip; the trace's are only compared with them), ``plant`` = ``r_out:S:L:B:E`` or ``token:K:P`` (one
expected value changed; the check must fail) or ``preload`` (the replay cache preloaded with every
entry one step too early), ``sdram`` (bytes a cycle the memory moves on its R and W channels, the
SDRAM's bandwidth; 0: a beat a cycle), ``out`` (a JSON file: the tokens drawn, each step's cycles
and the bytes it read and wrote, the weights' reads among them), ``preload`` (a run from a later
step starts with the replay cache a run from step 0 would have, written from the trace through the
build's public memories; FastCar's modes can then start anywhere).

Bus models: cocotbext-axi ``AxiStreamSource`` on every input stream, ``AxiStreamSink`` on every
output, ``AxiRam`` on ``rd_*`` and ``wr_*``, and a monitor on each address channel that checks and
counts every burst. The scoreboard counts steps in against rows, decisions and tokens out.
"""

import itertools
import json

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotbext.axi import (
    AxiBus,
    AxiRam,
    AxiReadBus,
    AxiStreamFrame,
    AxiStreamSink,
    AxiStreamSource,
    AxiWriteBus,
)

from hw.accel.replay_cache import ReplayCache
from hw.board.host import config_words
from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.attention_layer import group_layout
from hw.step.decode_step import decode_command_layout
from hw.step.decoder_layer import mlp_group_layout
from hw.step.residual import residual_out_layout
from hw.step.sampler import sampler_out_layout, sampler_z_layout, seed_layout
from hw.step.step_memory import kv_entry_words
from hw.step.tas_tap import decision_layout
from hw.step.weight_stream import pack_blocks, pack_channels
from sw.config import AccelConfig
from sw.perf.rtl_step import sdram_beat_every
from sw.spec import quant
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.stalls import random_pauses
from tb.step.bench import CLOCK_NS, Bench, stall_settings, stream_model, tap_bursts
from tb.step.cocotb_step_mlp import position, step_layers

MEM_BYTES = 1 << 23
PAGE = 4096
#: Steps the feed runs ahead of the checks.
AHEAD = 2


def memory_map(m, dw=64):
    """Byte addresses of the embeddings, the spatial embeddings, the KV cache and the weights' image."""
    dims = m["dims"]
    d = dims["d_model"]
    emb = 0
    spatial = -(-dims["vocab"] * d * 4 // PAGE) * PAGE
    kv = spatial + -(-dims["tokens_per_frame"] * d * 4 // PAGE) * PAGE
    kv_bytes = (dims["layers"] * dims["batch"] * dims["n_heads"] * dims["positions"]
                * kv_entry_words(dims["head_dim"], dw) * dw // 8)
    return emb, spatial, kv, kv + -(-kv_bytes // PAGE) * PAGE


def weight_image(t, m, ni, no, dw):
    """The weights and norm constants as :class:`hw.step.weight_stream.WeightStream` reads them: per
    layer the input norm, q, k, v, o and the MLP's norm; then the final norm and the LM head over
    the image tokens."""
    dims = m["dims"]
    off, C = m["image_token_offset"], dims["codebook"]
    out = []
    for li in range(dims["layers"]):
        out.append(pack_channels(t["n1_mult"][li], t["n1_shift"][li], dw))
        for n in ("q", "k", "v", "o"):
            w = t["wo" if n == "o" else f"w{n}"][li]
            out.append(pack_blocks(w, t[f"{n}_mult"][li], t[f"{n}_shift"][li], ni, no, dw))
        out.append(pack_channels(t["n2_mult"][li], t["n2_shift"][li], dw))
    out.append(pack_channels(t["nf_mult"], t["nf_shift"], dw))
    out.append(pack_blocks(t["head"][:, off:off + C].astype(np.int8), t["logit_mult"], t["logit_shift"],
                           ni, no, dw))
    return b"".join(out)


def kv_address(kv_base, dims, dw, li, b, h, p):
    """Where the RTL keeps layer ``li``'s row ``b``'s head ``h``'s key and value of position ``p``."""
    stride = kv_entry_words(dims["head_dim"], dw) * dw // 8
    return kv_base + (((li * dims["batch"] + b) * dims["n_heads"] + h) * dims["positions"] + p) * stride


def step_range(spec: str, S: int, video: bool, replay, start: int, N: int,
               preload: bool = False) -> list[int]:
    """The steps ``spec`` (the config's ``steps``) names: ``all``, ``first:N`` or ``from:A:N`` (``N``
    steps from step ``A``, the keys and values of the positions before ``A`` written into the memory
    from the trace first). A run from ``A`` cannot replay a row whose cached output the run did not
    compute (the replay cache is on chip) unless ``preload`` (the cache written from the trace first:
    see :func:`replay_cache_preload`), nor feed back a token drawn before it."""
    kind, *arg = spec.split(":")
    try:
        if kind == "all" and not arg:
            return list(range(S))
        if kind == "first" and len(arg) == 1:
            return list(range(min(S, int(arg[0]))))
        if kind == "from" and len(arg) == 2:
            a, n = int(arg[0]), int(arg[1])
            if not 0 <= a < S or n < 1:
                raise ValueError
            steps = list(range(a, min(S, a + n)))
            if a and video:
                raise AssertionError(f"steps {spec}: a video runs from step 0")
            late = [s for s in steps if replay[s].any() and s - N < a]
            if a and late and not preload:
                raise AssertionError(f"steps {spec}: step {late[0]} replays the output of step "
                                     f"{late[0] - N}, before the run's first (a mode without FastCar, a "
                                     f"run that starts a frame earlier, or the replay cache preloaded: "
                                     f"preload)")
            return steps
    except ValueError:
        pass
    raise AssertionError(f"steps {spec!r}: expected all, first:N or from:A:N (A < {S}, N >= 1)")


def replay_cache_preload(first: int, start: int, N: int):
    """What the replay cache holds when a run starts at step ``first``: ``(step, index)`` of the
    steps whose MLP outputs (the trace's ``y``: the outputs used, computed or themselves replayed)
    are the entries of in-frame position ``index``, the latest image step before ``first`` at each
    position that has one. A position without one needs none: the first frame, which replays
    nothing, writes every position before the second reads it."""
    return [(s, position(s, start, N)[1]) for s in range(max(start, first - N), first)]


async def preload_replay_cache(dut, t, first: int, start: int, dims, shift: int = 0) -> int:
    """Write :func:`replay_cache_preload`'s entries into the replay cache's block RAMs through
    Verilator's public memories (a build with ``REPLAY_CACHE_PUBLIC``): a FastCar run from a later
    step starts with the cache a run from step 0 would have. Returns the entries written."""
    L, B, N, d = dims["layers"], dims["batch"], dims["tokens_per_frame"], dims["d_model"]
    geom = ReplayCache(d, L, N, B)
    cache = dut.dut.layer.accel.cache
    banks = [getattr(cache, f"bank_{n}").mem for n in range(len(geom.bank_slices))]
    written = []
    for s, index in replay_cache_preload(first, start, N):
        for li, b in itertools.product(range(L), range(B)):
            word = int.from_bytes(t["y"][s - shift, li, b].astype(np.int8).tobytes(), "little")
            a = geom.entry(li, index, b)
            for (lo, w), mem in zip(geom.bank_slices, banks, strict=True):
                mem[a].value = (word >> lo) & ((1 << w) - 1)
            written.append((a, word))
    await ClockCycles(dut.clk, 1)
    for a, word in written[:: max(1, len(written) // 7)]:       # the writes landed
        got = sum(int(mem[a].value) << lo for (lo, _), mem in zip(geom.bank_slices, banks, strict=True))
        assert got == word, f"replay cache preload: entry {a} reads {got:#x}, wrote {word:#x}"
    return len(written)


class TB:
    def __init__(self, dut, taps):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = {n: stream_model(AxiStreamSource, dut, f"s_axis_{n}", stall_seed=s)
                    for n, s in (("i", None), ("grp", 1), ("cfg", None), ("mg", 2), ("seed", None))}
        outs = [("o", 7), ("d", None)] + ([("r", 8), ("z", None)] if taps else [])
        self.out = {n: stream_model(AxiStreamSink, dut, f"m_axis_{n}", stall_seed=s) for n, s in outs}
        self.ram = AxiRam(AxiBus(AxiWriteBus.from_prefix(dut, "wr"), AxiReadBus.from_prefix(dut, "rd")),
                          dut.clk, dut.rst, size=MEM_BYTES)
        for intf in (self.ram.write_if, self.ram.read_if):
            intf.log.setLevel("WARNING")
        p, seed = stall_settings()
        if p:
            for n, ch in enumerate((self.ram.read_if.ar_channel, self.ram.read_if.r_channel,
                                    self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                                    self.ram.write_if.b_channel)):
                ch.set_pause_generator(random_pauses(seed + 31 + n, p))
        bpc = bench_config().sdram
        if bpc:
            # The SDRAM's bandwidth: a data beat every nb / bpc cycles on the R and W channels.
            k = sdram_beat_every(bpc, len(dut.rd_rdata) // 8)
            for ch in (self.ram.read_if.r_channel, self.ram.write_if.w_channel):
                ch.set_pause_generator(itertools.cycle([True] * (k - 1) + [False]))

    reset = Bench.reset


@cocotb.test()
async def decode_steps(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    dims, dec = m["dims"], m["decode"]
    S, L, B, d, H, dh, N, PR, NS, C = (dims[k] for k in ("steps", "layers", "batch", "d_model", "n_heads",
                                                         "head_dim", "tokens_per_frame", "prompts", "samples",
                                                         "codebook"))
    start, off = m["prompt_len"], m["image_token_offset"]
    L0 = start - 1                                      # sample k is drawn after step L0 + k
    cfg: AccelConfig = config.require("accel")
    ni, no = cfg.mv_in, cfg.mv_out
    taps, video, preload = config.taps, config.video, config.preload
    steps = step_range(config.steps, S, video, t["replay"], start, N, preload)
    first = steps[0]
    guided = dec["cfg_scale"] is not None
    fastcar = dec["tau"] is not None
    sp = dec["sparse"]

    r_out = t["r_out"].astype(np.int64).copy()
    want_tok = t["sample_token"].astype(np.int64).copy()
    plant = config.plant
    if plant and plant != "preload":
        kind, *idx = plant.split(":")
        idx = tuple(int(i) for i in idx)
        if kind == "r_out":
            r_out[idx] += 1
        else:
            want_tok[idx] = (want_tok[idx] + 1) % C

    tb = TB(dut, taps)
    dw = len(dut.rd_rdata)
    emb_base, spatial_base, kv_base, w_base = memory_map(m, dw)
    tb.ram.write(emb_base, t["emb"].astype("<i4").tobytes())
    tb.ram.write(spatial_base, t["spatial"].astype("<i4").tobytes())
    image = weight_image(t, m, ni, no, dw)
    assert w_base + len(image) <= MEM_BYTES, \
        f"the weights' image ends at {w_base + len(image):#x}, past the memory"
    tb.ram.write(w_base, image)
    for name, v in (("eps", int(m["eps"])), ("gain", int(dec["cfg_gain"] or 0)), ("guided", int(guided)),
                    ("greedy", int(dec["temperature"] == 0)), ("emb_base", emb_base),
                    ("spatial_base", spatial_base), ("kv_base", kv_base), ("w_base", w_base),
                    ("token_offset", off),
                    ("sinks", sp["sinks"] if sp else 0), ("window", sp["window"] if sp else 0)):
        getattr(dut, name).value = v
    ew = kv_entry_words(dh, dw) * dw // 8
    for s in range(first):                              # a run from a later step: the earlier keys and values
        for li, b, h in itertools.product(range(L), range(B), range(H)):
            entry = np.concatenate([t["k"][s, li, b, h], t["v"][s, li, b, h]]).astype(np.int8).tobytes()
            tb.ram.write(kv_address(kv_base, dims, dw, li, b, h, s), entry.ljust(ew, b"\0"))
    await tb.reset()
    if preload and first > start:
        n = await preload_replay_cache(dut, t, first, start, dims, shift=int(plant == "preload"))
        dut._log.info(f"replay cache: {n} entries preloaded from the trace's steps before step {first}")
    bursts = {"ar": [], "aw": []}
    tap_bursts(tb.ram.read_if.ar_channel, "ar", dw // 8, 16, bursts["ar"])
    tap_bursts(tb.ram.write_if.aw_channel, "aw", dw // 8, 16, bursts["aw"])
    await tb.src["cfg"].send(AxiStreamFrame(config_words(cfg, step_layers(t, L))))
    await tb.src["cfg"].wait()
    f_seed = fields(seed_layout(PR))
    for p in range(PR):
        state = quant.sampler_state(int(dec["seed"]), p)
        if dec["temperature"] != 0 and first > L0:     # the draws of the samples before the run's first
            state = quant.draws(state, (min(first, L0 + NS) - L0) * C)[1]
        await tb.src["seed"].send(AxiStreamFrame([pack_fields(f_seed, prompt=p, state=state)]))
    await tb.src["seed"].wait()
    await ClockCycles(dut.clk, 4)

    # ---- what each step takes ----------------------------------------------------------------------
    f_i = fields(decode_command_layout(B, dims["vocab"], dims["positions"], N))
    f_mg, f_g = fields(mlp_group_layout(cfg)), fields(group_layout(dh, dims["positions"]))
    done = {"steps": 0}
    stepped, decided = Event(), Event()             # no coroutine waits a cycle at a time

    def sampling(s):
        return L0 <= s < L0 + NS

    async def feed():
        for n, s in enumerate(steps):
            while done["steps"] < n - AHEAD:
                stepped.clear()
                await stepped.wait()
            frame, index = position(s, start, N)
            cmd = {"step.pos": s, "step.index": index, "step.spatial": int(s >= start),
                   "step.replaying": int(fastcar and s - start >= N), "sample": int(sampling(s)),
                   "feedback": int(video and s >= start)}
            cmd.update({f"step.token.{b}": int(t["token"][s, b]) for b in range(B)})
            await tb.src["i"].send(AxiStreamFrame([pack_fields(f_i, **cmd)]))
            for li in range(L):
                g = {f"{x}.{e}": int(t[f"rope_{x}"][s, e]) for x in ("c", "s") for e in range(dh // 2)}
                g.update(history=0, a_exp=int(t["a_exp"][li]), a_mult=int(t["a_mult"][li]),
                         a_shift=int(t["a_shift"][li]), threshold=int(t["threshold"][li]))
                await tb.src["grp"].send(AxiStreamFrame([pack_fields(f_g, **g)]))
                await tb.src["mg"].send(AxiStreamFrame([pack_fields(f_mg, layer=li, index=index,
                                                             y_mult=int(t["y_mult"][li]),
                                                             y_shift=int(t["y_shift"][li]))]))

    decisions = []

    async def collect(name, into, event):
        while True:
            into.extend((await tb.out[name].recv()).tdata)
            event.set()

    cocotb.start_soon(feed())
    cocotb.start_soon(collect("d", decisions, decided))
    f_r, f_d = fields(residual_out_layout()), fields(decision_layout())
    f_o, f_z = fields(sampler_out_layout(PR, C)), fields(sampler_z_layout(PR, C))
    drawn, cycles, step_bytes = [], [], []
    moved = [0, 0]
    t0 = cocotb.utils.get_sim_time("ns")
    for s in steps:
        if taps:
            for li in range(L):
                for b in range(B):
                    where = f"step {s}, layer {li}, block decoder_layer, row {b}"
                    got = [unpack_field(f_r, w, "data.r") for w in (await tb.out["r"].recv()).tdata]
                    assert len(got) == d, f"{where}: {len(got)} elements out, expected {d}"
                    for e in range(d):
                        assert got[e] == r_out[s, li, b, e], (f"{where}, element {e}: RTL r_out {got[e]}, "
                                                              f"expected {r_out[s, li, b, e]}")
        if sampling(s):
            k = s - L0
            for p in range(PR):
                where = f"step {s} (sample {k}), block token head, prompt {p}"
                word = (await tb.out["o"].recv()).tdata[0]
                if taps:
                    zs = []
                    while len(zs) < C:
                        zs += (await tb.out["z"].recv()).tdata
                    for n, zw in enumerate(zs):
                        zv = unpack_field(f_z, zw, "data.z")
                        assert zv == t["sample_z"][k, p, n], (f"{where}, element {n}: RTL z {zv}, "
                                                              f"expected {t['sample_z'][k, p, n]}")
                got_p, tok = unpack_field(f_o, word, "data.prompt"), unpack_field(f_o, word, "data.token")
                assert got_p == p, f"{where}: the token is prompt {got_p}'s"
                assert tok == want_tok[k, p], f"{where}: RTL token {tok}, expected {want_tok[k, p]}"
                drawn.append(tok)
        while len(decisions) < (len(cycles) + 1) * L * B:      # the step's last layer has left the MLP
            decided.clear()
            await decided.wait()
        now = cocotb.utils.get_sim_time("ns")
        cycles.append(int((now - t0) // CLOCK_NS))
        words = [sum(n for _, n in bursts[ch]) for ch in ("ar", "aw")]
        step_bytes.append([(w - m0) * dw // 8 for w, m0 in zip(words, moved, strict=True)])
        moved = words
        t0 = now
        done["steps"] += 1
        stepped.set()
        if s % 32 == 0 or s == steps[-1]:
            dut._log.info(f"step {s}: bit-exact ({cycles[-1]} cycles)")

    for _ in range(100):
        await RisingEdge(dut.clk)
    for name, sink in tb.out.items():
        assert sink.empty(), f"more beats on m_axis_{name} than the steps in make"
    assert int(dut.error.value) == 0, "an AXI answer other than OKAY"
    rows = len(steps) * L * B
    assert len(decisions) == rows, f"scoreboard: {rows} rows in, {len(decisions)} decisions out"
    for n, word in enumerate(decisions):
        s, li, b = steps[n // (L * B)], n // B % L, n % B
        got = (unpack_field(f_d, word, "data.tas"), unpack_field(f_d, word, "data.replay"))
        assert got == (int(t["tas"][s, li, b]), int(t["replay"][s, li, b])), \
            f"step {s}, layer {li}, block decoder_layer, row {b}: RTL decision {got}"
    # Every key and value the RTL wrote, where the reads found them.
    for s in steps:
        for li in range(L):
            for b in range(B):
                for h in range(H):
                    got = np.frombuffer(tb.ram.read(kv_address(kv_base, dims, dw, li, b, h, s), ew), np.int8)
                    want = np.concatenate([t["k"][s, li, b, h], t["v"][s, li, b, h]])
                    assert (got[:2 * dh] == want).all(), \
                        (f"step {s}, layer {li}, block kv cache, row {b}, head {h}: RTL wrote "
                         f"{list(got[:2 * dh])}")
    reads, writes = sum(n for _, n in bursts["ar"]), sum(n for _, n in bursts["aw"])
    weight_reads = sum(n for a, n in bursts["ar"] if a >= w_base)
    replays = int(t["replay"][steps].sum())
    dut._log.info(f"decode_step: {len(steps)} steps ({rows} rows, {replays} replayed), {len(drawn)} tokens "
                  f"bit-exact{' (fed back on chip)' if video else ''}; {sum(cycles)} cycles, "
                  f"{reads * dw // 8} bytes read ({weight_reads * dw // 8} of weights), "
                  f"{writes * dw // 8} written")
    if config.out:
        with open(config.out, "w") as f:
            json.dump({"steps": steps, "tokens": drawn, "cycles": cycles, "read_bytes": reads * dw // 8,
                       "write_bytes": writes * dw // 8, "weight_read_bytes": weight_reads * dw // 8,
                       "step_bytes": step_bytes, "data_width": dw, "mv": [ni, no],
                       "video": video, "stall": stall_settings()[0],
                       "sdram_bytes_per_cycle": config.sdram}, f)
