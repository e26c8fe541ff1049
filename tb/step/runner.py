"""The decode step's testbench runners: build each block (or the whole step) behind its AXI-Stream
adapter on a simulator and run its cocotb test on a full-step trace. The tests (``test_step.py``)
and the tools (``calibrate.py``, ``e2e.py``, ``video.py``) import them from here."""

from pathlib import Path

from hw.accel.accelerator import Accelerator
from hw.lib.axi_reader import AxiReader
from hw.lib.axi_writer import AxiWriter
from hw.lib.axis_adapter import AxisAdapter
from hw.step.attention_head import AttentionHead
from hw.step.attention_layer import AttentionLayer
from hw.step.decoder_layer import DecoderLayer
from hw.step.projection import Projection
from hw.step.qk_score import QkScore
from hw.step.qkv import QkvRope
from hw.step.residual import Residual
from hw.step.rmsnorm import RmsNorm
from hw.step.rope import Rope
from hw.step.sampler import Sampler
from hw.step.softmax_av import SoftmaxAv
from hw.step.token_head import TokenHead
from sw.trace.full_step import load_full_step
from tb.runner import BUILD, run_cocotb

HERE = Path(__file__).resolve().parent


def run_block(block, test_module, params, make, trace, sim, tag, env, public_vars=()):
    """Build ``AxisAdapter(make(*params))`` (cached per parameters) and run its cocotb test on ``trace``."""
    name = "-".join(str(x) for x in (block, sim, *params))
    run_cocotb(lambda: AxisAdapter(make(*params)), toplevel=f"{block}_axis", test_module=test_module,
               test_dir=HERE, build_dir=BUILD / "step" / name, sim=sim,
               env={"FASTCAR_TRACE": str(trace), **env}, results_name=f"results-{tag}.xml",
               key=(block, *params), public="ports", public_vars=public_vars)


def dims(trace, *names):
    d = load_full_step(trace, verify=False).manifest["dims"]
    return tuple(d[n] for n in names)


def run_sampler(trace, sim, tag, **env):
    run_block("sampler", "cocotb_sampler", dims(trace, "prompts", "codebook"), Sampler, trace, sim, tag, env)


def run_rmsnorm(trace, sim, tag, **env):
    run_block("rmsnorm", "cocotb_rmsnorm", dims(trace, "d_model"), RmsNorm, trace, sim, tag, env)


def run_softmax(trace, sim, tag, **env):
    run_block("softmax", "cocotb_softmax", dims(trace, "head_dim", "positions"), SoftmaxAv, trace, sim, tag,
              env)


def run_rope(trace, sim, tag, **env):
    run_block("rope", "cocotb_rope", dims(trace, "head_dim"), Rope, trace, sim, tag, env)


def run_residual(trace, sim, tag, **env):
    run_block("residual", "cocotb_residual", (), Residual, trace, sim, tag, env)


def run_attention(block, trace, sim, tag, **env):
    make, params = {"qk_score": (QkScore, dims(trace, "head_dim")),
                    "attention_head": (AttentionHead, dims(trace, "head_dim", "positions"))}[block]
    run_block(block, "cocotb_attention", params, make, trace, sim, tag, {"FASTCAR_BLOCK": block, **env})


def run_projection(block, trace, sim, tag, **env):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    run_block(f"projection_{block}", "cocotb_projection", (ni, no, block == "qkv"),
              lambda a, b, r: Projection(a, b, requant=r), trace, sim, tag,
              {"FASTCAR_BLOCK": block, "FASTCAR_MV": f"{ni}:{no}", **env})


def run_axi_reader(sim, tag, **env):
    burst, count_bits = 16, 24
    run_block("axi_reader", "cocotb_axi_reader", (32, 64, burst, count_bits),
              lambda aw, dw, b, cb: AxiReader(aw, dw, max_burst=b, depth=4 * b, count_bits=cb),
              None, sim, tag,
              {"FASTCAR_BURST": str(burst), "FASTCAR_COUNT_BITS": str(count_bits), **env})


def run_token_head(trace, sim, tag, **env):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    run_block("token_head", "cocotb_token_head", (*dims(trace, "d_model", "prompts", "codebook"), ni, no),
              lambda d, p, c, a, b: TokenHead(d, p, c, n_in=a, n_out=b), trace, sim, tag,
              {"FASTCAR_NI": str(ni), "FASTCAR_NO": str(no), **env})


def step_accel(trace):
    """The accelerator for a trace's MLP: the shipped one for the shipped model, else the same design
    at the trace's sizes (4 x 4 matrix-vector units, 2 chunks a row)."""
    from sw.config import DEFAULT_ACCEL, AccelConfig

    d, dff, L, N, B = dims(trace, "d_model", "d_ff", "layers", "tokens_per_frame", "batch")
    got = {"d_model": d, "d_ff": dff, "layers": L, "tokens_per_frame": N, "batch": B}
    if all(getattr(DEFAULT_ACCEL, k) == v for k, v in got.items()):
        return DEFAULT_ACCEL
    return AccelConfig(**got, chunks=2, tas_lanes=d, mv_in=4, mv_out=4)


def run_step_mlp(trace, sim, tag, **env):
    import json

    cfg = step_accel(trace)
    key = "d{d_model}-ff{d_ff}-l{layers}-n{tokens_per_frame}-b{batch}-c{cores}x{chunks}-mv{mv_in}x{mv_out}"
    run_block("step_mlp", "cocotb_step_mlp", (key.format(**cfg.to_dict()),),
              lambda _: Accelerator(cfg, decisions="row"), trace, sim, tag,
              {"FASTCAR_ACCEL": json.dumps(cfg.to_dict()), **env})


def run_axi_writer(sim, tag, **env):
    burst, count_bits = 16, 24
    run_block("axi_writer", "cocotb_axi_writer", (32, 64, burst, count_bits),
              lambda aw, dw, b, cb: AxiWriter(aw, dw, max_burst=b, count_bits=cb), None, sim, tag,
              {"FASTCAR_BURST": str(burst), "FASTCAR_COUNT_BITS": str(count_bits), **env})


def run_qkv(trace, sim, tag, **env):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    d, h, b, dh = dims(trace, "d_model", "n_heads", "batch", "head_dim")
    if dh % no:
        ni, no = 4, 4                      # the small trace's heads (16 elements) take 4 x 4
    run_block("qkv", "cocotb_qkv", (d, h, b, ni, no), lambda *p: QkvRope(*p[:3], n_in=p[3], n_out=p[4]),
              trace, sim, tag, {"FASTCAR_MV": f"{ni}:{no}", **env})


def run_attention_layer(trace, sim, tag, **env):
    from sw.config import DEFAULT_ACCEL

    ni, no = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    d, h, b, dh, p = dims(trace, "d_model", "n_heads", "batch", "head_dim", "positions")
    if dh % no:
        ni, no = 4, 4                      # the small trace's heads (16 elements) take 4 x 4
    run_block("attention_layer", "cocotb_attention_layer", (d, h, b, p, ni, no),
              lambda *a: AttentionLayer(*a[:3], max_positions=a[3], n_in=a[4], n_out=a[5]),
              trace, sim, tag, {"FASTCAR_MV": f"{ni}:{no}", "FASTCAR_MAX_POSITIONS": str(p), **env})


def run_decoder_layer(trace, sim, tag, **env):
    import json

    cfg = step_accel(trace)
    h, p = dims(trace, "n_heads", "positions")
    key = "d{d_model}-ff{d_ff}-l{layers}-n{tokens_per_frame}-b{batch}-c{cores}x{chunks}-mv{mv_in}x{mv_out}"
    run_block("decoder_layer", "cocotb_decoder_layer", (key.format(**cfg.to_dict()), h, p),
              lambda _, heads, positions: DecoderLayer(cfg, heads, max_positions=positions), trace, sim, tag,
              {"FASTCAR_ACCEL": json.dumps(cfg.to_dict()), "FASTCAR_MAX_POSITIONS": str(p), **env})


#: The replay cache's block RAMs, public in the step's Verilator builds besides the ports: a FastCar
#: run from a later step (``FASTCAR_PRELOAD=1``) writes them before it starts.
REPLAY_CACHE_PUBLIC = (("*cache*bank_*", "mem"),)


def run_decode_step(trace, sim, tag, *, taps=True, variant="", **env):
    """The whole step on ``trace``; ``variant`` names a build directory of its own (a long run beside
    another on the same build)."""
    import json

    from hw.step.decode_step import DecodeStep

    cfg = step_accel(trace)
    h, v, pr, c, p = dims(trace, "n_heads", "vocab", "prompts", "codebook", "positions")
    key = "d{d_model}-ff{d_ff}-l{layers}-n{tokens_per_frame}-b{batch}-c{cores}x{chunks}-mv{mv_in}x{mv_out}"
    key += f"-{variant}" if variant else ""
    run_block("decode_step", "cocotb_decode_step", (key.format(**cfg.to_dict()), h, v, pr, c, p, int(taps)),
              lambda _, *a: DecodeStep(cfg, *a[:5], taps=bool(a[5])), trace, sim, tag,
              {"FASTCAR_ACCEL": json.dumps(cfg.to_dict()), "FASTCAR_TAPS": str(int(taps)), **env},
              public_vars=REPLAY_CACHE_PUBLIC)
