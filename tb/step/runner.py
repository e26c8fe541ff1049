"""The decode step's testbench runners: build each block (or the whole step) behind its AXI-Stream
adapter on a simulator and run its cocotb test on a full-step trace. The tests (``test_step.py``)
and the tools (``calibrate.py``, ``e2e.py``, ``video.py``) import them from here.

Every runner takes the trace, the simulator and a tag (which names the run's files in the build
directory), and as keywords the fields of the testbench's :class:`sw.config.BenchConfig` that the
caller chooses: ``seed``, ``stall``, ``steps``, ``plant``, and for some blocks more (``stride``;
the whole step's ``video``, ``preload``, ``sdram``, ``out``); the runner adds what the build fixes
(the block, the matrix-vector unit, the accelerator, ...). For example
``run_decode_step(trace, "verilator", "stall0.2", stall=0.2, seed=30, steps="first:85")``, or with a
whole config: ``run_decode_step(trace, "verilator", "from", bench=BenchConfig(steps="from:40:5"))``.
"""

from dataclasses import replace
from pathlib import Path

from hw.accel.accelerator import Accelerator
from hw.lib.axi_reader import AxiReader
from hw.lib.axi_writer import AxiWriter
from hw.lib.axis_adapter import AxisAdapter
from hw.step.attention_head import AttentionHead
from hw.step.attention_layer import AttentionLayer
from hw.step.projection import Projection
from hw.step.qk_score import QkScore
from hw.step.qkv import QkvRope
from hw.step.residual import Residual
from hw.step.rmsnorm import RmsNorm
from hw.step.rope import Rope
from hw.step.sampler import Sampler
from hw.step.softmax_av import SoftmaxAv
from hw.step.token_head import TokenHead
from sw.config import BenchConfig
from sw.trace.full_step import load_full_step
from tb.runner import BUILD, run_cocotb

HERE = Path(__file__).resolve().parent


def _config(fields: dict, **fixed) -> BenchConfig:
    """A runner's :class:`sw.config.BenchConfig`: ``fields["bench"]`` (default: every field at its
    default) with the caller's other ``fields`` and the runner's ``fixed`` ones (the trace, what the
    build fixes) set; a field given twice is a ``TypeError``."""
    fields = dict(fields)
    return replace(fields.pop("bench", None) or BenchConfig(), **fixed, **fields)


def run_block(block, test_module, params, make, sim, tag, bench: BenchConfig, public_vars=()):
    """Build ``AxisAdapter(make(*params))`` (cached per parameters) and run its cocotb test configured
    by ``bench``."""
    name = "-".join(str(x) for x in (block, sim, *params))
    run_cocotb(lambda: AxisAdapter(make(*params)), toplevel=f"{block}_axis", test_module=test_module,
               test_dir=HERE, build_dir=BUILD / "step" / name, sim=sim, bench=bench, tag=tag,
               key=(block, *params), public="ports", public_vars=public_vars)


def dims(trace, *names):
    d = load_full_step(trace, verify=False).manifest["dims"]
    return tuple(d[n] for n in names)


def run_sampler(trace, sim, tag, **fields):
    run_block("sampler", "cocotb_sampler", dims(trace, "prompts", "codebook"), Sampler, sim, tag,
              _config(fields, trace=trace))


def run_rmsnorm(trace, sim, tag, **fields):
    run_block("rmsnorm", "cocotb_rmsnorm", dims(trace, "d_model"), RmsNorm, sim, tag,
              _config(fields, trace=trace))


def run_softmax(trace, sim, tag, **fields):
    run_block("softmax", "cocotb_softmax", dims(trace, "head_dim", "positions"), SoftmaxAv, sim, tag,
              _config(fields, trace=trace))


def run_rope(trace, sim, tag, **fields):
    run_block("rope", "cocotb_rope", dims(trace, "head_dim"), Rope, sim, tag,
              _config(fields, trace=trace))


def run_residual(trace, sim, tag, **fields):
    run_block("residual", "cocotb_residual", (), Residual, sim, tag, _config(fields, trace=trace))


def run_attention(block, trace, sim, tag, **fields):
    make, params = {"qk_score": (QkScore, dims(trace, "head_dim")),
                    "attention_head": (AttentionHead, dims(trace, "head_dim", "positions"))}[block]
    run_block(block, "cocotb_attention", params, make, sim, tag,
              _config(fields, trace=trace, block=block))


def run_projection(block, trace, sim, tag, **fields):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    run_block(f"projection_{block}", "cocotb_projection", (ni, no, block == "qkv"),
              lambda a, b, r: Projection(a, b, requant=r), sim, tag,
              _config(fields, trace=trace, block=block, mv=(ni, no)))


def run_axi_reader(sim, tag, **fields):
    burst, count_bits = 16, 24
    run_block("axi_reader", "cocotb_axi_reader", (32, 64, burst, count_bits),
              lambda aw, dw, b, cb: AxiReader(aw, dw, max_burst=b, depth=4 * b, count_bits=cb), sim, tag,
              _config(fields, burst=burst, count_bits=count_bits))


def run_token_head(trace, sim, tag, **fields):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    run_block("token_head", "cocotb_token_head", (*dims(trace, "d_model", "prompts", "codebook"), ni, no),
              lambda d, p, c, a, b: TokenHead(d, p, c, n_in=a, n_out=b), sim, tag,
              _config(fields, trace=trace, mv=(ni, no)))


def step_accel(trace):
    """The accelerator for a trace's MLP: the shipped one for the shipped model, else the same design
    at the trace's sizes (4 x 4 matrix-vector units, 2 chunks a row)."""
    from sw.config import DEFAULT_ACCEL, AccelConfig

    d, dff, L, N, B = dims(trace, "d_model", "d_ff", "layers", "tokens_per_frame", "batch")
    got = {"d_model": d, "d_ff": dff, "layers": L, "tokens_per_frame": N, "batch": B}
    if all(getattr(DEFAULT_ACCEL, k) == v for k, v in got.items()):
        return DEFAULT_ACCEL
    return AccelConfig(**got, chunks=2, tas_lanes=d, mv_in=4, mv_out=4)


def run_step_mlp(trace, sim, tag, **fields):
    cfg = step_accel(trace)
    key = "d{d_model}-ff{d_ff}-l{layers}-n{tokens_per_frame}-b{batch}-c{cores}x{chunks}-mv{mv_in}x{mv_out}"
    run_block("step_mlp", "cocotb_step_mlp", (key.format(**cfg.to_dict()),),
              lambda _: Accelerator(cfg, decisions="row"), sim, tag,
              _config(fields, trace=trace, accel=cfg))


def run_axi_writer(sim, tag, **fields):
    burst, count_bits = 16, 24
    run_block("axi_writer", "cocotb_axi_writer", (32, 64, burst, count_bits),
              lambda aw, dw, b, cb: AxiWriter(aw, dw, max_burst=b, count_bits=cb), sim, tag,
              _config(fields, burst=burst, count_bits=count_bits))


def run_qkv(trace, sim, tag, **fields):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    d, h, b, dh = dims(trace, "d_model", "n_heads", "batch", "head_dim")
    if dh % no:
        ni, no = 4, 4                      # the small trace's heads (16 elements) take 4 x 4
    run_block("qkv", "cocotb_qkv", (d, h, b, ni, no), lambda *p: QkvRope(*p[:3], n_in=p[3], n_out=p[4]),
              sim, tag, _config(fields, trace=trace, mv=(ni, no)))


def run_attention_layer(trace, sim, tag, **fields):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    d, h, b, dh, p = dims(trace, "d_model", "n_heads", "batch", "head_dim", "positions")
    if dh % no:
        ni, no = 4, 4                      # the small trace's heads (16 elements) take 4 x 4
    run_block("attention_layer", "cocotb_attention_layer", (d, h, b, p, ni, no),
              lambda *a: AttentionLayer(*a[:3], max_positions=a[3], n_in=a[4], n_out=a[5]),
              sim, tag, _config(fields, trace=trace, mv=(ni, no), max_positions=p))


#: The replay cache's block RAMs, public in the step's Verilator builds besides the ports: a FastCar
#: run from a later step (``preload=True``) writes them before it starts.
REPLAY_CACHE_PUBLIC = (("*cache*bank_*", "mem"),)


def run_decode_step(trace, sim, tag, *, taps=True, variant="", **fields):
    """The whole step on ``trace``, built with the ``r`` and ``z`` taps unless ``taps`` is false;
    ``variant`` names a build directory of its own (a long run beside another on the same build);
    ``fields``: the run's further :class:`sw.config.BenchConfig` fields (``steps``, ``stall``,
    ``seed``, ``plant``, ``video``, ``preload``, ``sdram``, ``out``)."""
    from hw.step.decode_step import DecodeStep

    cfg = step_accel(trace)
    h, v, pr, c, p = dims(trace, "n_heads", "vocab", "prompts", "codebook", "positions")
    key = "d{d_model}-ff{d_ff}-l{layers}-n{tokens_per_frame}-b{batch}-c{cores}x{chunks}-mv{mv_in}x{mv_out}"
    key += f"-{variant}" if variant else ""
    run_block("decode_step", "cocotb_decode_step", (key.format(**cfg.to_dict()), h, v, pr, c, p, int(taps)),
              lambda _, *a: DecodeStep(cfg, *a[:5], taps=bool(a[5])), sim, tag,
              _config(fields, trace=trace, accel=cfg, taps=bool(taps)), public_vars=REPLAY_CACHE_PUBLIC)
