"""System model of the whole decode step on the ULX3S: on-chip memory budget, SDRAM traffic,
compute and the host link, for dense, FastCar, sparse attention (SA) and FastCar + SA.

``python -m sw.perf.system_model`` prints the memory budget of the shipped model (and of a d 64 variant),
the two placements it decides between, and the end-to-end table against the paper's 1.77x
(FastCar at 80 % replay) and 2.1x (with sparse attention); it writes ``build/system/report.json``
and ``build/system/endtoend.png``. Every assumption is a field of :class:`System`, printed with
the table; the replay statistics are measured on decode traces (``golden/fastcar`` for FastCar,
and a trace exported with sparse attention for FastCar + SA when given ``--sa-trace``).

The model, per decode step (one position for the B rows of the batch)::

    time = max(attention compute / clock, KV bytes / SDRAM bandwidth)
           + max(rest of the step / clock, other SDRAM bytes / SDRAM bandwidth) + link bytes / link rate

as the RTL runs a step (``nox -s step -- --calibrate``): attention consumes the keys and values as
they stream; the rest of the step (projections, norms, the MLP's computed rows, the token head)
takes the cycles measured on the RTL (:data:`REST_CYCLES`) and runs under the other SDRAM traffic,
the weights' reads, whose prefetch runs ahead of the blocks (the link carries the sampled tokens).
``System(overlap=True)`` takes ``max(compute, SDRAM)`` with the MAC-array compute below, the bound
of a design that prefetches enough to hide everything. Compute runs on the
accelerator's MAC array at its measured utilisation: the projections, attention (q.k and p.v
over the attended positions), the MLP of the computed rows and the LM head; norms, RoPE and
softmax are element-wise work at ``elementwise_per_cycle``. SDRAM traffic is what the placement
leaves off chip: streamed weights (an MLP's weights are read only when some row of its group
computes), the KV cache (read over the attended positions, one new k/v written) and each row's
int32 embedding and spatial row, laid out as the RTL's ``StepMemory`` reads and writes them
(``sw.perf.rtl_step.step_bytes``, equal to every burst the RTL made: ``nox -s step -- --calibrate``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

#: One DP16KD holds 2,048 bytes at 8 of its 9 bits per byte (the ECP5-85F has 208).
DP16KD_BYTES = 2048
DP16KD_COUNT = 208


#: The rest of a step's compute outside attention (projections, norms, the MLP's computed rows, the
#: token head), in cycles: the ``step``, ``sample``, ``computed_row`` and ``computing_group``
#: coefficients of :data:`sw.perf.rtl_step.FEATURES` fitted on the decode step's RTL when its weights
#: came on the step's streams (commit dc44ed7, ``nox -s step -- --calibrate``: the first 85 steps of
#: dense and FastCar, SDRAM at 2.67 bytes a cycle), where no other traffic hid them. The RTL as built
#: reads its weights over AXI4 and hides these cycles behind that traffic, so it cannot measure them
#: again; it checks the composition instead (:func:`step_costs`).
REST_CYCLES = (21439.60, -4528.51, 128.37, 136.16)


@dataclass(frozen=True)
class System:
    """Every assumption of the model, with where it comes from."""

    clock_mhz: float = 50.0            # the board top's PLL: the clock a routed whole chip meets today
    macs: int = 128                    # 2 cores x 8 x 8 MAC units
    mac_utilisation: float = 0.93      # measured on the MLP (nox -s bench); assumed for the projections
    elementwise_per_cycle: int = 8     # norms, RoPE, softmax, residuals: 8 elements per cycle (assumed)
    sdram_mhz: float = 100.0           # ULX3S SDRAM (16 bit) behind LiteDRAM at 100 MHz (assumed)
    sdram_bytes_per_cycle: int = 2     # 16-bit bus
    sdram_efficiency: float = 0.7      # bursts, row misses and refresh (assumed)
    link_baud: int = 3_000_000         # the FTDI UART of the ULX3S, 10 bits per byte
    token_bytes: int = 2               # one token id per prompt and step on the link
    sinks: int = 5                     # sparse attention: sink positions (the whole 5-token prompt)
    window: int = 65                   # sparse attention window; >= tokens_per_frame + 1 so k(p - N) stays
    overlap: bool = False              # every compute hidden under SDRAM streaming (max), or the step as the
    #                                    RTL runs it (step_costs; nox -s step -- --calibrate)
    block: tuple = (8, 8)              # the MAC array's weight block (mv_in x mv_out): streamed weights'
    #                                    layout in memory (hw/step/weight_stream.py)

    @property
    def sdram_bytes_per_s(self) -> float:
        return self.sdram_mhz * 1e6 * self.sdram_bytes_per_cycle * self.sdram_efficiency


@dataclass(frozen=True)
class Dims:
    d: int = 96
    d_ff: int = 256
    layers: int = 4
    heads: int = 4
    head_dim: int = 24
    vocab: int = 529
    tokens_per_frame: int = 64
    prompt_len: int = 5
    frames: int = 8
    batch: int = 4                     # two prompts, each with its CFG row
    prompts: int = 2
    codebook: int = 512                # image tokens: the LM head the sampler draws from

    @classmethod
    def from_config(cls, mc, **kw):
        return cls(d=mc.d_model, d_ff=mc.d_ff, layers=mc.n_layers, heads=mc.n_heads, head_dim=mc.head_dim,
                   vocab=mc.vocab_size, tokens_per_frame=mc.tokens_per_frame, prompt_len=mc.prompt_len,
                   codebook=mc.codebook_size, **kw)

    @property
    def positions(self) -> int:
        return self.prompt_len + self.frames * self.tokens_per_frame


def blocks(n_bytes: int) -> int:
    return -(-n_bytes // DP16KD_BYTES)


def memory_budget(m: Dims, s: System, *, sparse: bool) -> list[dict]:
    """Bytes and DP16KD blocks of every item of the decode step, int8 throughout."""
    kv_pos = min(m.positions, s.sinks + s.window) if sparse else m.positions
    items = {
        "attention weights (q, k, v, o; all layers)": m.layers * 4 * m.d * m.d,
        "MLP weights (gate, up, down; all layers)": m.layers * 3 * m.d * m.d_ff,
        "MLP tables (SiLU, requantisation)": m.layers * (256 + 3 * 3 * m.d_ff + 3 * 3 * m.d),
        "token and in-frame position embeddings": (m.vocab + m.tokens_per_frame) * m.d,
        "LM head": m.d * m.vocab,
        "norm weights": (2 * m.layers + 1) * m.d,
        f"KV cache ({'sinks + window' if sparse else 'whole context'}: {kv_pos} positions x {m.batch} rows)":
            2 * m.layers * m.batch * m.heads * m.head_dim * kv_pos,
        "replay cache (layers x positions x rows x d)": m.layers * m.tokens_per_frame * m.batch * m.d,
        "TAS chain counters": m.layers * m.tokens_per_frame * m.batch,
        "activations (residual, q/k/v, attention scores, MLP hidden)": m.batch * (4 * m.d + m.heads * kv_pos
                                                                                + m.d_ff) * 4,
    }
    return [{"item": k, "bytes": int(v), "dp16kd": blocks(int(v))} for k, v in items.items()]


#: Items that a placement may keep on chip or stream from SDRAM (memory_budget's keys start so).
MOVABLE = ("attention weights", "MLP weights", "LM head", "KV cache")
#: On chip in every placement: small, or read every cycle (the MLP's tables, the replay cache and
#: the chain counters are what the accelerator keeps today). Embeddings always stream: one row
#: per token. Activations sit in distributed RAM (LUT RAM), not in block RAM.
FIXED_ON_CHIP = ("MLP tables", "replay cache", "TAS chain counters", "norm weights")


@dataclass(frozen=True)
class Placement:
    """Which of :data:`MOVABLE` stream from SDRAM; the KV cache stays on chip only with sparse
    attention (the whole context never fits)."""

    streamed: tuple[str, ...]

    @property
    def name(self) -> str:
        on = [i for i in MOVABLE if i not in self.streamed]
        return "on chip: " + (", ".join(on) if on else "nothing movable")

    def streams(self, item: str) -> bool:
        return item in self.streamed


def on_chip_blocks(budget: list[dict], p: Placement) -> int:
    keep = FIXED_ON_CHIP + tuple(i for i in MOVABLE if not p.streams(i))
    return sum(r["dp16kd"] for r in budget if r["item"].startswith(keep))


def placements(m: Dims, s: System) -> list[dict]:
    """Every placement of :data:`MOVABLE`, with its DP16KD count under sparse attention and
    whether it fits (dense attention always streams the KV cache)."""
    from itertools import product

    budget = memory_budget(m, s, sparse=True)
    out = []
    for bits in product((False, True), repeat=len(MOVABLE)):
        p = Placement(tuple(i for i, b in zip(MOVABLE, bits, strict=True) if b))
        n = on_chip_blocks(budget, p)
        out.append({"placement": p, "dp16kd": n, "fits": n <= DP16KD_COUNT})
    return out


@dataclass
class ReplayStats:
    """Measured on a decode trace: per layer and step, the computed rows and whether every row
    of the group replayed (then the group needs no MLP weights)."""

    computed_rows: np.ndarray          # [steps, layers]
    all_replayed: np.ndarray           # [steps, layers] bool
    source: str = ""

    @classmethod
    def dense(cls, m: Dims):
        steps = m.frames * m.tokens_per_frame
        return cls(np.full((steps, m.layers), m.batch), np.zeros((steps, m.layers), bool), "dense")

    @classmethod
    def from_decode(cls, replayed: np.ndarray, prompts: int = 2, source: str = "") -> list[ReplayStats]:
        """One :class:`ReplayStats` per video of a generation run, as the decode step batches it.

        ``replayed``: bool ``[L, F, N, B]`` (:class:`sw.model.fastcar.DecodeStats`, classifier-free
        guidance: the conditional rows, then the unconditional ones). The step decodes ``prompts``
        prompts at once, each with its two rows; consecutive prompts share a video (a last prompt
        left alone makes a video of its own, batched as if its partner replayed alongside it).
        """
        rep = np.asarray(replayed, bool)
        L, F, N, B = rep.shape
        if B % 2:
            raise ValueError(f"replayed has {B} rows; classifier-free guidance gives an even number")
        n = B // 2
        out = []
        for a in range(0, n, prompts):
            idx = [i for p in range(a, min(a + prompts, n)) for i in (p, p + n)]
            r = rep[..., idx].reshape(L, F * N, len(idx)).transpose(1, 0, 2)    # [steps, L, rows]
            pad = prompts - len(idx) // 2
            r = np.concatenate([r, np.tile(r[..., :2], (1, 1, pad))], axis=2)
            out.append(cls((~r).sum(2), r.all(2), source))
        return out

    @classmethod
    def from_trace(cls, path):
        from sw.trace.decode import load_decode_trace

        tr = load_decode_trace(path)
        L, B = tr.dims["layers"], tr.dims["batch"]
        rep = tr.replay.reshape(-1, L, B).astype(bool)            # groups are step major, layer minor
        return cls((~rep).sum(2), rep.all(2), str(path))


def step_costs(m: Dims, s: System, p: Placement, stats: ReplayStats, *, sparse: bool, first: int = 0) -> dict:
    """Per-video totals of compute cycles, SDRAM bytes, link bytes and time (``stats``: the image
    steps from image step ``first`` on)."""
    steps = stats.computed_rows.shape[0]
    pos = m.prompt_len + first + np.arange(steps) + 1             # attended positions at each step
    kv = np.minimum(pos, s.sinks + s.window) if sparse else pos
    rate = s.macs * s.mac_utilisation
    B, L, d, hd = m.batch, m.layers, m.d, m.heads * m.head_dim
    proj = L * B * 4 * d * d
    attn = L * B * 2 * hd * kv
    mlp = stats.computed_rows.sum(1) * 3 * d * m.d_ff
    head = B * d * m.vocab
    elem = (L * B * (6 * d + 3 * m.heads * kv) + B * m.vocab) / s.elementwise_per_cycle
    compute = (proj + attn + mlp + head) / rate + elem
    # The RTL's layout (hw/step/step_memory.py, sw/perf/rtl_step.step_bytes): each head's key and value
    # of a position in whole 64-bit beats; the earlier attended ones read and the new one written.
    from sw.perf.rtl_step import entry_bytes

    entry = entry_bytes(m.head_dim)
    kv_bytes = L * B * m.heads * entry * kv
    sdram = np.full(steps, float(B * d * 4 * 2))                  # each row's int32 embedding and spatial row
    # Streamed weights as the RTL lays them out and reads them (hw/step/weight_stream.py,
    # sw.perf.rtl_step.weight_bytes): each layer's norms and projections every step; the final norm
    # and the LM head over the image tokens, once per prompt, on every image step but the last.
    from sw.perf.rtl_step import weight_bytes

    wd = {"d_model": d, "layers": L, "prompts": m.prompts, "codebook": m.codebook}
    layer_w = weight_bytes(wd, s.block, sample=False)
    head_w = weight_bytes(wd, s.block, sample=True) - layer_w
    samples = first + np.arange(steps) < m.frames * m.tokens_per_frame - 1
    if p.streams("attention weights"):
        sdram += layer_w
    if p.streams("LM head"):
        sdram += head_w * samples
    if p.streams("MLP weights"):
        sdram += (~stats.all_replayed).sum(1) * 3 * d * m.d_ff
    if p.streams("KV cache") or not sparse:
        sdram += kv_bytes
    hz = s.clock_mhz * 1e6
    t_compute = compute / hz
    t_sdram = sdram / s.sdram_bytes_per_s
    t_link = m.prompts * s.token_bytes * 10 / s.link_baud
    if s.overlap:
        t_step = np.maximum(t_compute, t_sdram)
    else:
        # As the RTL runs a step (nox -s step -- --calibrate): attention consumes its keys and values
        # as they stream, so it takes the longer of its compute and its KV traffic; the rest of the
        # step (projections, norms, the MLP rows, the token head: REST_CYCLES; a computed MLP row costs
        # the step far less than its MACs at the array's rate, the cores overlap the next row's
        # attention) runs under the other SDRAM traffic, the weights' prefetch running ahead of the
        # blocks: the longer of the two adds.
        c = REST_CYCLES
        rest = c[0] + c[1] * samples + c[2] * stats.computed_rows.sum(1) + c[3] * (~stats.all_replayed).sum(1)
        attn_cycles = attn / rate + L * B * 3 * m.heads * kv / s.elementwise_per_cycle
        kv_streamed = p.streams("KV cache") or not sparse
        t_kv = kv_bytes / s.sdram_bytes_per_s if kv_streamed else 0.0
        t_step = np.maximum(attn_cycles / hz, t_kv) + np.maximum(rest / hz, t_sdram - t_kv)
    t = t_step + t_link
    return {"steps": int(steps), "compute_cycles": float(compute.sum()), "sdram_bytes": float(sdram.sum()),
            "step_cycles": float(t_step.sum() * s.clock_mhz * 1e6),
            "time_s": float(t.sum()), "ms_per_token": float(t.mean() * 1e3),
            "compute_bound_steps": int((t_compute >= t_sdram).sum()),
            "mlp_macs": float(mlp.sum()), "all_replayed_groups": float(stats.all_replayed.mean())}


MODES = ("dense", "FastCar", "sparse attention", "FastCar + sparse attention")


def end_to_end(m: Dims, s: System, p: Placement, fastcar: ReplayStats, fastcar_sa: ReplayStats | None,
               baseline_s: float | None = None) -> list[dict]:
    """The four modes in placement ``p``; speed-up against ``baseline_s`` (default: dense in ``p``)."""
    rows, dense = [], ReplayStats.dense(m)
    base = baseline_s
    for mode, stats, sparse in zip(MODES, (dense, fastcar, dense, fastcar_sa or fastcar),
                                   (False, False, True, True), strict=True):
        c = step_costs(m, s, p, stats, sparse=sparse)
        base = base or c["time_s"]
        rows.append({"placement": p.name, "mode": mode, **c, "speedup": base / c["time_s"],
                     "replay_stats": stats.source})
    return rows


def board_times(m: Dims, stats: list[ReplayStats], *, sparse: tuple[int, int] | None,
                s: System | None = None) -> dict[str, float]:
    """Seconds of the image steps of the videos in ``stats`` (one :class:`ReplayStats` per video of
    ``m.prompts`` prompts), summed, in every placement that fits the ECP5-85F: the board designs a
    setting could be built on (``sparse`` = ``(sinks, window)``, ``None``: dense attention, which
    streams the KV cache whatever the placement says)."""
    from dataclasses import replace

    s = s or System()
    if sparse:
        s = replace(s, sinks=sparse[0], window=sparse[1])
    out = {}
    for c in placements(m, s):
        if c["fits"]:
            out[c["placement"].name] = float(sum(step_costs(m, s, c["placement"], st, sparse=bool(sparse))["time_s"]
                                                 for st in stats))
    return out


def rtl_step_cycles(m: Dims, stats: ReplayStats, *, sparse: tuple[int, int] | None, coef=None) -> np.ndarray:
    """Cycles of each image step of one video (``m.prompts`` prompts, ``m.batch`` rows) on the decode
    step as built in RTL, by the cycle model fitted on RTL runs (:data:`sw.perf.rtl_step.CALIBRATED`):
    ``sparse`` = ``(sinks, window)`` attends those positions only (``None``: every earlier one);
    ``stats`` gives the rows each layer computes."""
    from sw.perf import rtl_step

    coef = np.asarray(rtl_step.CALIBRATED["coefficients"] if coef is None else coef, np.float64)
    steps = stats.computed_rows.shape[0]
    pos = m.prompt_len + np.arange(steps) + 1                     # attended positions, the current one too
    kv = np.minimum(pos, sparse[0] + sparse[1]) if sparse else pos
    x = np.stack([np.ones(steps), (np.arange(steps) < steps - 1).astype(float),  # the last draws nothing
                  m.layers * m.batch * m.heads * kv, stats.computed_rows.sum(1),
                  (~stats.all_replayed).sum(1),
                  np.zeros(steps)], 1)                            # image steps: not the video's first
    return rtl_step.predict(x, coef)


def rtl_video_cycles(m: Dims, stats: ReplayStats, *, sparse: tuple[int, int] | None, coef=None) -> float:
    """A whole video's cycles on the decode step as built in RTL, as ``nox -s step -- --e2e`` measures
    it: the prompt's steps (every row computes; the first waits for its first reads, the last samples)
    and the image steps of :func:`rtl_step_cycles`."""
    from sw.perf import rtl_step

    coef = np.asarray(rtl_step.CALIBRATED["coefficients"] if coef is None else coef, np.float64)
    p = np.arange(m.prompt_len)
    x = np.stack([np.ones(m.prompt_len), (p == m.prompt_len - 1).astype(float),
                  m.layers * m.batch * m.heads * (p + 1), np.full(m.prompt_len, m.layers * m.batch),
                  np.full(m.prompt_len, m.layers), (p == 0).astype(float)], 1)
    return float(rtl_step.predict(x, coef).sum() + rtl_step_cycles(m, stats, sparse=sparse, coef=coef).sum())


def rtl_as_built(m: Dims, s: System, fastcar: ReplayStats, fastcar_sa: ReplayStats | None,
                 coef=None) -> list[dict]:
    """The four modes on the decode step as built in RTL (``hw/step/decode_step.py``: the embeddings,
    the KV cache, the projections' and LM head's weights and the norms' constants over AXI4, the
    MLP's weights resident), each image step's cycles by :func:`rtl_step_cycles`, at the cycle
    model's SDRAM bandwidth, not :class:`System`'s; time at ``s.clock_mhz`` plus the link; speed-up
    against its own dense mode. ``weights_mb``: the weights it reads over AXI4 in a video
    (:func:`sw.perf.rtl_step.weight_bytes`)."""
    from sw.perf import rtl_step

    rows = []
    for mode, stats, sparse in zip(MODES, (ReplayStats.dense(m), fastcar, ReplayStats.dense(m),
                                           fastcar_sa or fastcar), (False, False, True, True), strict=True):
        steps = stats.computed_rows.shape[0]
        cycles = rtl_step_cycles(m, stats, sparse=(s.sinks, s.window) if sparse else None, coef=coef)
        t = cycles / (s.clock_mhz * 1e6) + m.prompts * s.token_bytes * 10 / s.link_baud
        wd = {"d_model": m.d, "layers": m.layers, "prompts": m.prompts, "codebook": m.codebook}
        weights = (rtl_step.weight_bytes(wd, s.block, sample=False)
                   + rtl_step.weight_bytes(wd, s.block, sample=True) * (steps - 1))
        rows.append({"mode": mode, "cycles": float(cycles.sum()), "time_s": float(t.sum()),
                     "ms_per_token": float(t.mean() * 1e3), "weights_mb": weights / 1e6,
                     "replay_stats": stats.source})
    for r in rows:
        r["speedup"] = rows[0]["time_s"] / r["time_s"]
    return rows


def choose(m: Dims, s: System, fastcar: ReplayStats,
           fastcar_sa: ReplayStats | None) -> tuple[list, Placement]:
    """Every placement that fits, with its times; the chosen one is the fastest in FastCar + SA."""
    rows = []
    for c in placements(m, s):
        if not c["fits"]:
            continue
        e = end_to_end(m, s, c["placement"], fastcar, fastcar_sa)
        rows.append({"placement": c["placement"], "dp16kd": c["dp16kd"],
                     **{r["mode"]: r["time_s"] for r in e}})
    best = min(rows, key=lambda r: (r[MODES[-1]], r[MODES[1]]))["placement"]
    return rows, best


def _table(rows, cols) -> str:
    out = ["| " + " | ".join(c for c, _ in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(f(r) for _, f in cols) + " |" for r in rows]
    return "\n".join(out)


#: The accelerator as built: every MLP weight resident, everything else would stream.
AS_BUILT = Placement(("attention weights", "LM head", "KV cache"))


def report(m: Dims, s: System, fastcar: ReplayStats, fastcar_sa: ReplayStats | None, small: Dims) -> dict:
    budgets = {name: memory_budget(dims, s, sparse=sp) for name, dims, sp in (
        ("shipped, dense attention", m, False), ("shipped, sparse attention", m, True),
        ("d 64, sparse attention", small, True))}
    options, best = choose(m, s, fastcar, fastcar_sa)
    small_fit = [c for c in placements(small, s) if c["fits"] and not c["placement"].streamed]
    small_most = min((c for c in placements(small, s) if c["fits"]),
                     key=lambda c: (len(c["placement"].streamed), -c["dp16kd"]))
    # The baseline is the best dense design, not dense in the chosen placement.
    base = min(o["dense"] for o in options)
    best_per_mode = {mo: min(options, key=lambda o, mo=mo: o[mo]) for mo in MODES}
    return {"system": asdict(s), "dims": asdict(m), "small_dims": asdict(small), "budgets": budgets,
            "placements": [{**{k: v for k, v in o.items() if k != "placement"}, "name": o["placement"].name,
                            "streamed": list(o["placement"].streamed)} for o in options],
            "chosen": best.name, "d64_everything_on_chip": bool(small_fit), "baseline_s": base,
            "d64_most_on_chip": {"name": small_most["placement"].name, "dp16kd": small_most["dp16kd"],
                                 "streamed": list(small_most["placement"].streamed)},
            "best_per_mode": {mo: {"placement": o["placement"].name, "time_s": o[mo], "speedup": base / o[mo]}
                              for mo, o in best_per_mode.items()},
            "end_to_end": (end_to_end(m, s, best, fastcar, fastcar_sa, base)
                           + end_to_end(m, s, AS_BUILT, fastcar, fastcar_sa, base)),
            "rtl_as_built": rtl_as_built(m, s, fastcar, fastcar_sa)}


def plot(rows, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    modes = list(MODES)
    x = np.arange(len(modes))
    names = list(dict.fromkeys(r["placement"] for r in rows))  # one when the best design is the as-built one
    width = 0.76 / len(names)
    for k, name in enumerate(names):
        v = [next(r["speedup"] for r in rows if r["placement"] == name and r["mode"] == mo) for mo in modes]
        ax.bar(x + (k - (len(names) - 1) / 2) * width, v, width, label=name)
    ax.axhline(1.77, color="k", ls="--", lw=0.8)
    ax.axhline(2.1, color="k", ls=":", lw=0.8)
    ax.text(len(modes) - 0.5, 1.79, "paper: FastCar 1.77x", ha="right", fontsize=8)
    ax.text(len(modes) - 0.5, 2.12, "paper: + sparse attention 2.1x", ha="right", fontsize=8)
    ax.set_xticks(x, modes, fontsize=8)
    ax.set_ylabel("end-to-end speed-up vs the best dense")
    ax.set_title("Whole decode step on the ULX3S (python -m sw.perf.system_model)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.perf.system_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=Path("golden/fastcar"), help="FastCar decode trace")
    ap.add_argument("--sa-trace", type=Path, default=None,
                    help="FastCar decode trace exported with sparse attention "
                         "(default: the --trace statistics)")
    ap.add_argument("--clock-mhz", type=float, default=System.clock_mhz)
    ap.add_argument("--sdram-mhz", type=float, default=System.sdram_mhz)
    ap.add_argument("--out", type=Path, default=Path("build/system"))
    args = ap.parse_args(argv)
    from sw.trace.decode import load_decode_trace
    from sw.trace.store import TraceError

    try:
        tr = load_decode_trace(args.trace, verify=False)
        mc = tr.manifest["model"]
        m = Dims(d=mc["d_model"], d_ff=mc["d_ff"], layers=mc["n_layers"], heads=mc["n_heads"],
                 head_dim=mc["d_model"] // mc["n_heads"], vocab=mc["vocab_size"],
                 tokens_per_frame=mc["tokens_per_frame"], prompt_len=mc["prompt_len"],
                 frames=tr.manifest["frames"], codebook=mc["codebook_size"],
                 batch=tr.dims["batch"], prompts=len(tr.manifest["decode"]["prompts"]))
        fc = ReplayStats.from_trace(args.trace)
        sa = ReplayStats.from_trace(args.sa_trace) if args.sa_trace else None
    except (TraceError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    s = System(clock_mhz=args.clock_mhz, sdram_mhz=args.sdram_mhz)
    small = Dims(**{**asdict(m), "d": 64, "d_ff": 176, "heads": 4, "head_dim": 16})
    rep = report(m, s, fc, sa, small)
    for name, items in rep["budgets"].items():
        total = sum(i["dp16kd"] for i in items)
        print(f"\nMemory budget, {name} ({total} DP16KD if everything were on chip, of {DP16KD_COUNT}):")
        print(_table(items, [("item", lambda r: r["item"]), ("bytes", lambda r: f"{r['bytes']:,}"),
                             ("DP16KD", lambda r: str(r["dp16kd"]))]))
    print("\nAssumptions: " + ", ".join(f"{k} {v}" for k, v in asdict(s).items())
          + f" (SDRAM {s.sdram_bytes_per_s / 1e6:.0f} MB/s)")
    print("\nPlacements that fit (sparse attention; seconds per video of the default prompts):")
    cols = [("placement", lambda r: r["name"]), ("DP16KD", lambda r: str(r["dp16kd"]))]
    cols += [(mo, lambda r, mo=mo: f"{r[mo]:.3f}") for mo in MODES]
    print(_table(rep["placements"], cols))
    fits = "fits" if rep["d64_everything_on_chip"] else "does not fit"
    most = rep["d64_most_on_chip"]
    print(f"chosen (fastest with FastCar + sparse attention): {rep['chosen']}; "
          f"d 64 model with everything on chip: {fits}; the most it keeps on chip: {most['name']} "
          f"({most['dp16kd']} DP16KD; streams {', '.join(most['streamed']) or 'nothing'})")
    print(f"\nBest placement per mode (speed-up against the best dense design, {rep['baseline_s']:.3f} s "
          "per video):")
    print(_table([{"mode": k, **v} for k, v in rep["best_per_mode"].items()], [
        ("mode", lambda r: r["mode"]), ("placement", lambda r: r["placement"]),
        ("s / video", lambda r: f"{r['time_s']:.3f}"), ("speed-up", lambda r: f"{r['speedup']:.2f}x")]))
    print("\nGroups in which every row replays (no MLP weights needed): "
          + ", ".join(f"{r['mode']} {r['all_replayed_groups']:.1%}" for r in rep["end_to_end"][:4]
                      if "FastCar" in r["mode"]))
    print("\nEnd to end in the chosen placement, then in the accelerator as built (speed-up against the "
          "best dense design):")
    print(_table(rep["end_to_end"], [
        ("placement", lambda r: r["placement"]), ("mode", lambda r: r["mode"]),
        ("ms / token step", lambda r: f"{r['ms_per_token']:.3f}"),
        ("s / video", lambda r: f"{r['time_s']:.3f}"),
        ("SDRAM MB / video", lambda r: f"{r['sdram_bytes'] / 1e6:.1f}"),
        ("compute-bound steps", lambda r: f"{r['compute_bound_steps']} / {r['steps']}"),
        ("speed-up", lambda r: f"{r['speedup']:.2f}x")]))
    from sw.perf.rtl_step import CALIBRATED

    print(f"\nThe decode step as built in RTL (the KV cache, embeddings and weights over AXI4, the MLP's "
          f"weights resident), cycles by the model fitted on RTL runs ({CALIBRATED['command']}; SDRAM "
          f"{CALIBRATED['sdram_bytes_per_cycle']} bytes a cycle), at {s.clock_mhz:g} MHz; speed-up against "
          "its dense mode:")
    print(_table(rep["rtl_as_built"], [
        ("mode", lambda r: r["mode"]), ("ms / token step", lambda r: f"{r['ms_per_token']:.3f}"),
        ("s / video", lambda r: f"{r['time_s']:.3f}"), ("cycles / video", lambda r: f"{r['cycles']:,.0f}"),
        ("weights over AXI4, MB / video", lambda r: f"{r['weights_mb']:.1f}"),
        ("speed-up", lambda r: f"{r['speedup']:.2f}x")]))
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "report.json.tmp"
    tmp.write_text(json.dumps(rep, indent=1) + "\n")
    tmp.replace(args.out / "report.json")
    plot(rep["end_to_end"], args.out / "endtoend.png")
    print(f"\nwrote {args.out / 'report.json'} and {args.out / 'endtoend.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["System", "Dims", "Placement", "ReplayStats", "memory_budget", "placements", "step_costs",
           "end_to_end", "rtl_as_built", "choose", "report", "main"]
