"""pytest driver: the blocks of the whole decode step on Verilator (Icarus too when installed) against a
full-step trace; each check shown to fail on a planted wrong value, naming the step, block and element.

The trace: ``--step-trace DIR`` (``nox -s step`` exports the shipped model's), else one exported here
from the small test checkpoint (2 frames).
"""

from pathlib import Path

import pytest

from sw.trace.full_step import load_full_step
from tb.runner import CocotbFailure, available_simulators
from tb.step.runner import (  # noqa: F401
    HERE,
    REPLAY_CACHE_PUBLIC,
    dims,
    run_attention,
    run_attention_layer,
    run_axi_reader,
    run_axi_writer,
    run_block,
    run_decode_step,
    run_projection,
    run_qkv,
    run_residual,
    run_rmsnorm,
    run_rope,
    run_sampler,
    run_softmax,
    run_step_mlp,
    run_token_head,
    step_accel,
)


def on_build(build: str):
    """The tests of one Verilator build share an xdist group: in the test suite (``--dist loadgroup``)
    one worker builds it and runs them, while the other runs other tests instead of waiting on the
    build's lock (the Icarus builds have one test each). The small trace is exported once a worker."""
    return pytest.mark.xdist_group(f"step-{build}")


def by_build(build: str, *values):
    """A parameter set ``values`` whose test runs on the build ``build`` (:func:`on_build`); no
    ``values``: the one value ``build`` (a block named as its build)."""
    return pytest.param(*(values or (build,)), marks=on_build(build))


@pytest.fixture(scope="module")
def small_trace(tiny_ckpt, tmp_path_factory):
    """A full-step trace of the small test checkpoint: 2 frames, 64 image tokens, guidance 1.5."""
    from sw.trace.full_step import export_full_step

    out = tmp_path_factory.mktemp("step") / "full_step"
    export_full_step(out, checkpoint=tiny_ckpt, frames=2, tau=0.0)
    return out


@pytest.fixture(scope="module")
def step_trace(request, small_trace):
    """``--step-trace DIR`` (``nox -s step``: the shipped model's), else :func:`small_trace`."""
    given = request.config.getoption("--step-trace", default=None)
    return Path(given).resolve() if given else small_trace


@on_build("sampler")
def test_sampler_draws_the_trace(step_trace):
    """Every z and token of the trace, on Verilator, under random idle and backpressure."""
    run_sampler(step_trace, "verilator", "stall0.3", stall=0.3, seed=3)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_sampler_on_icarus(small_trace):
    """The second simulator, on the small trace (Icarus takes minutes for the shipped one)."""
    run_sampler(small_trace, "icarus", "icarus", stall=0.2, seed=4)


@pytest.mark.parametrize("plant, named", [("z:1:0:5", "prompt 0, element 5"),
                                           ("token:2:1", "prompt 1: RTL token")])
@on_build("sampler")
def test_a_planted_wrong_value_is_named(step_trace, plant, named):
    with pytest.raises(CocotbFailure, match="block sampler") as e:
        run_sampler(step_trace, "verilator", f"plant-{plant.replace(':', '_')}", plant=plant)
    assert named in str(e.value) and "step " in str(e.value)


@on_build("rmsnorm")
def test_rmsnorm_normalises_the_trace(step_trace):
    """The post-attention norm of every step, layer and row of the trace, on Verilator."""
    run_rmsnorm(step_trace, "verilator", "stall0.3", stall=0.3, seed=5)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_rmsnorm_on_icarus(small_trace):
    run_rmsnorm(small_trace, "icarus", "icarus", stall=0.2, seed=6)


@on_build("rmsnorm")
def test_a_planted_wrong_norm_is_named(step_trace):
    with pytest.raises(CocotbFailure, match="step 3, layer 1, block rmsnorm") as e:
        run_rmsnorm(step_trace, "verilator", "plant", plant="3:1:0:7")
    assert "row 0, element 7" in str(e.value)


@on_build("softmax")
def test_softmax_av_attends_as_the_trace(request, step_trace):
    """Every head's attention output of the trace (the shipped trace: every 16th step), on Verilator."""
    steps = "stride:16" if request.config.getoption("--step-trace", default=None) else "all"
    run_softmax(step_trace, "verilator", "stall0.3", stall=0.3, seed=7,
                steps=steps)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_softmax_av_on_icarus(small_trace):
    run_softmax(small_trace, "icarus", "icarus", stall=0.2, seed=8,
                steps="stride:16")


@on_build("softmax")
def test_a_planted_wrong_attention_is_named(step_trace):
    with pytest.raises(CocotbFailure, match="step 0, layer 0, block softmax_av, row 1") as e:
        run_softmax(step_trace, "verilator", "plant", plant="0:0:1:3", steps="stride:64")
    assert "element 3" in str(e.value)


@on_build("rope")
def test_rope_rotates_as_the_trace(step_trace):
    """Every head of q and k of the trace, on Verilator."""
    run_rope(step_trace, "verilator", "stall0.3", stall=0.3, seed=9)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_rope_on_icarus(small_trace):
    run_rope(small_trace, "icarus", "icarus", stall=0.2, seed=10)


@on_build("rope")
def test_a_planted_wrong_rotation_is_named(step_trace):
    with pytest.raises(CocotbFailure, match="step 2, layer 1, block rope .k., row 0, head 1, element 4"):
        run_rope(step_trace, "verilator", "plant", plant="k:2:1:0:1:4")


@on_build("residual")
def test_residual_adds_as_the_trace(step_trace):
    """Both residual adds of every step, layer and row of the trace, on Verilator."""
    run_residual(step_trace, "verilator", "stall0.3", stall=0.3, seed=11)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_residual_on_icarus(small_trace):
    run_residual(small_trace, "icarus", "icarus", stall=0.2, seed=12)


@on_build("residual")
@pytest.mark.parametrize("plant, named", [
    ("r_mid:1:0:1:9", "step 1, layer 0, block residual (attention), row 1"),
    ("r_out:0:1:0:3", "step 0, layer 1, block residual (mlp), row 0")])
def test_a_planted_wrong_residual_is_named(step_trace, plant, named):
    with pytest.raises(CocotbFailure, match=named.replace("(", ".").replace(")", ".")) as e:
        run_residual(step_trace, "verilator", f"plant-{plant.split(':')[0]}", plant=plant)
    assert "element " + plant.split(":")[-1] in str(e.value)


@pytest.mark.parametrize("block", [by_build("qk_score"), by_build("attention_head")])
def test_attention_from_q_k_v(request, step_trace, block):
    """Every head's scores, and every head's attention output and every row's FastCar decision from q, k
    and v alone (the shipped trace: every 16th step; the small one: every 3rd), on Verilator."""
    steps = "stride:16" if request.config.getoption("--step-trace", default=None) else "stride:3"
    run_attention(block, step_trace, "verilator", "stall0.3", stall=0.3,
                  seed=13, steps=steps)


@pytest.fixture(scope="module")
def small_sparse_trace(small_trace, tiny_ckpt, tmp_path_factory):
    """The small trace's model in FastCar + sparse attention: 2 sinks and a window one longer than a frame."""
    from sw.trace.full_step import export_full_step

    n = dims(small_trace, "tokens_per_frame")[0]
    out = tmp_path_factory.mktemp("step") / "full_step_sparse"
    export_full_step(out, checkpoint=tiny_ckpt, frames=2, tau=0.0, sinks=2, window=n + 1)
    return out


@on_build("attention_head")
def test_attention_with_sparse_masks(small_sparse_trace):
    """Heads and decisions under sinks + window masks (CI's trace is dense; ``nox -s step -- --mode
    fastcar+sparse`` runs every block on the shipped model's sparse trace)."""
    steps, n = dims(small_sparse_trace, "steps", "tokens_per_frame")
    assert steps > 2 + n + 1, "the masks would be causal"
    run_attention("attention_head", small_sparse_trace, "verilator", "sparse", stall=0.2,
                  seed=17)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_attention_head_on_icarus(small_trace):
    run_attention("attention_head", small_trace, "icarus", "icarus", stall=0.2, seed=14,
                  steps="stride:32")


@pytest.mark.parametrize("block, plant, named", [
    by_build("qk_score", "qk_score", "0:1:0:1:0",
             "step 0, layer 1, block qk_score, row 0, head 1, position 0"),
    by_build("attention_head", "attention_head", "0:0:1:30",
             "step 0, layer 0, block attention_head, row 1, head 1, element 30"),
    by_build("attention_head", "attention_head", "tas:-1:0:1", "layer 0, block tas_tap, row 1: RTL tas")])
def test_a_planted_wrong_score_or_attention_is_named(step_trace, block, plant, named):
    with pytest.raises(CocotbFailure, match=named) as e:
        run_attention(block, step_trace, "verilator", "plant", plant=plant, steps="stride:64")
    assert "RTL" in str(e.value)


@pytest.mark.parametrize("block", [by_build("projection_qkv", "qkv"),
                                   by_build("projection_o_head", "o_head")])
def test_projections_on_the_mac_unit(request, step_trace, block):
    """q, k and v, the output projection and the LM head of the trace (the shipped trace: every 64th
    step; the small one: every 4th), at the accelerator's MAC geometry, on Verilator."""
    steps = "stride:64" if request.config.getoption("--step-trace", default=None) else "stride:4"
    run_projection(block, step_trace, "verilator", "stall0.3", stall=0.3,
                   seed=15, steps=steps)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_projection_on_icarus(small_trace):
    run_projection("o_head", small_trace, "icarus", "icarus", stall=0.2, seed=16,
                   steps="stride:32")


@pytest.mark.parametrize("block, plant, named", [
    by_build("projection_qkv", "qkv", "k:0:1:1:5", "step 0, layer 1, block projection .k., row 1, element 5"),
    by_build("projection_o_head", "o_head", "logits:0:0:7",
             "step 0, block projection .logits., row 0, element 7")])
def test_a_planted_wrong_projection_is_named(step_trace, block, plant, named):
    with pytest.raises(CocotbFailure, match=named):
        run_projection(block, step_trace, "verilator", "plant", plant=plant,
                       steps="stride:64")


@on_build("axi_reader")
def test_axi_reader_streams_regions():
    """Regions read through cocotbext-axi's AxiRamRead, with pauses on every channel."""
    run_axi_reader("verilator", "stall0.4", stall=0.4, seed=18)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_axi_reader_on_icarus():
    run_axi_reader("icarus", "icarus", stall=0.3, seed=19)


@on_build("axi_reader")
def test_axi_reader_names_a_planted_wrong_word():
    with pytest.raises(CocotbFailure, match="region 0 .20 words at 0xfe8., word 5: RTL"):
        run_axi_reader("verilator", "plant", plant="5")


@on_build("token_head")
def test_token_head_draws_the_trace(request, step_trace):
    """From the last layer's residual rows to the tokens: the final norm, the LM head over the image
    tokens and the sampler, every z and token (the shipped trace: every 32nd sample, each alone; the
    small trace: every sample, back to back), on Verilator."""
    stride = 32 if request.config.getoption("--step-trace", default=None) else 1
    run_token_head(step_trace, "verilator", "stall0.3", stall=0.3, seed=21,
                   stride=stride)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_token_head_on_icarus(small_trace):
    run_token_head(small_trace, "icarus", "icarus", stall=0.2, seed=22,
                   stride=16)


@pytest.mark.parametrize("plant, named", [("z:1:0:5", "prompt 0, element 5"),
                                           ("token:2:1", "prompt 1: RTL token")])
@on_build("token_head")
def test_token_head_names_a_planted_wrong_value(step_trace, plant, named):
    with pytest.raises(CocotbFailure, match="block token head") as e:
        run_token_head(step_trace, "verilator", f"plant-{plant.replace(':', '_')}", plant=plant,
                       stride=1)
    assert named in str(e.value) and "step " in str(e.value)


@on_build("step_mlp")
def test_mlp_with_given_decisions(step_trace):
    """The MLP with FastCar in the step: every step and layer of the trace, each row's decision given
    with it, every output computed or replayed, on Verilator."""
    run_step_mlp(step_trace, "verilator", "stall0.3", stall=0.3, seed=23)


@on_build("step_mlp")
def test_step_mlp_names_a_planted_wrong_element(step_trace):
    with pytest.raises(CocotbFailure, match="step 7, layer 1, block mlp, row 2") as e:
        run_step_mlp(step_trace, "verilator", "plant", plant="7:1:2:3")
    assert "element 3" in str(e.value)


@on_build("axi_writer")
def test_axi_writer_writes_regions():
    """Regions written through cocotbext-axi's AxiRamWrite, with pauses on every channel."""
    run_axi_writer("verilator", "stall0.4", stall=0.4, seed=24)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_axi_writer_on_icarus():
    run_axi_writer("icarus", "icarus", stall=0.3, seed=25)


@on_build("axi_writer")
def test_axi_writer_names_a_planted_wrong_word():
    with pytest.raises(CocotbFailure, match="region 0 .20 words at 0xfe8., word 5: RTL wrote"):
        run_axi_writer("verilator", "plant", plant="5")


@on_build("qkv")
def test_qkv_from_the_residual(request, step_trace):
    """q, k (after RoPE) and v of every head and row from the residual rows into each layer (the
    shipped trace: every 16th step; the small trace: every 4th), on Verilator."""
    steps = "stride:16" if request.config.getoption("--step-trace", default=None) else "stride:4"
    run_qkv(step_trace, "verilator", "stall0.3", stall=0.3, seed=26,
            steps=steps)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
def test_qkv_on_icarus(small_trace):
    run_qkv(small_trace, "icarus", "icarus", stall=0.2, seed=27,
            steps="stride:32")


@on_build("qkv")
@pytest.mark.parametrize("plant, named", [
    ("k:4:1:2:1:5", "step 4, layer 1, block qkv, row 2, head 1, k element 5"),
    ("v:8:0:0:0:0", "step 8, layer 0, block qkv, row 0, head 0, v element 0")])
def test_qkv_names_a_planted_wrong_element(step_trace, plant, named):
    with pytest.raises(CocotbFailure, match=named):
        run_qkv(step_trace, "verilator", f"plant-{plant[0]}", plant=plant, steps="stride:4")


@on_build("attention_layer")
def test_attention_layer_from_the_residual(request, step_trace):
    """A layer's whole attention from r_in, the weights and the attended positions' keys and values: every
    r_mid, decision and new key and value (the shipped trace: every 64th step; the small trace: every
    8th), on Verilator."""
    shipped = request.config.getoption("--step-trace", default=None)
    steps = f"stride:{64 if shipped else 8}"
    run_attention_layer(step_trace, "verilator", "stall0.3", stall=0.3, seed=28,
                        steps=steps)


@on_build("attention_layer")
def test_attention_layer_names_a_planted_wrong_element(step_trace):
    with pytest.raises(CocotbFailure, match="step 8, layer 1, block attention_layer, row 3, element 7"):
        run_attention_layer(step_trace, "verilator", "plant", plant="8:1:3:7",
                            steps="stride:8")


@on_build("decode_step")
def test_decode_steps_whole(request, step_trace, tmp_path):
    """Whole decode steps from the first: the embeddings and the KV cache over AXI4 in AxiRam, every
    layer, the LM head and the sampler; every r_out, decision, z, token and key and value written,
    on Verilator.
    The decoder layer is checked here, in the step, and by its amaranth.sim unit test
    (``tests/hw/step/test_decoder_layer.py``): every layer's ``r_out`` and decision is a tap of the step,
    named by step, layer, block ``decoder_layer``, row and element.
    The shipped trace (``--step-trace``): the prompt and the first 80 image tokens, each step's tokens
    taken from the trace, with idle inputs, backpressure and memory pauses. The small trace: its whole
    generation (the prompt and 2 frames) by the RTL alone: after the prompt, each step's tokens are
    the ones the RTL drew after the step before (fed back on chip), each compared with the golden
    model's as it is drawn. (On the small trace, tokens taken from the trace and the stalls: the
    runs from a later step below, which the stalls slow less than they would the whole video.)"""
    import json

    if request.config.getoption("--step-trace", default=None):
        run_decode_step(step_trace, "verilator", "stall0.2", stall=0.2, seed=30, steps="first:85")
        return
    out = tmp_path / "rtl.json"
    run_decode_step(step_trace, "verilator", "video", video=True, steps="all", out=out)
    tr = load_full_step(step_trace, verify=False)
    rtl = json.loads(out.read_text())
    assert rtl["video"] and len(rtl["steps"]) == tr.manifest["dims"]["steps"]
    assert rtl["tokens"] == tr.t["sample_token"].reshape(-1).tolist()


@on_build("decode_step")
@pytest.mark.parametrize("plant, named", [
    ("r_out:3:1:2:4", "step 3, layer 1, block decoder_layer, row 2, element 4"),
    ("token:2:1", "block token head, prompt 1: RTL token")])
def test_decode_step_names_a_planted_wrong_value(step_trace, plant, named):
    start = load_full_step(step_trace, verify=False).manifest["prompt_len"]
    with pytest.raises(CocotbFailure, match=named):
        run_decode_step(step_trace, "verilator", f"plant-{plant.split(':')[0]}", plant=plant,
                        steps=f"first:{start + 3}")


@on_build("decode_step")
def test_decode_steps_from_a_later_step(small_trace, tmp_path):
    """Steps from the middle of the first frame, the earlier keys and values written into the memory
    from the trace and the sampler's generator advanced past the earlier draws: bit-exact as from
    the first, with idle inputs, backpressure and memory pauses; a run whose replays need rows from
    before it is refused."""
    import json

    out = tmp_path / "rtl.json"
    run_decode_step(small_trace, "verilator", "from", steps="from:40:5", stall=0.2, seed=31, out=out)
    rtl = json.loads(out.read_text())
    assert rtl["steps"] == list(range(40, 45)) and len(rtl["tokens"]) == 5 * 2
    with pytest.raises(CocotbFailure, match="step 69 replays the output of step 5"):
        run_decode_step(small_trace, "verilator", "from-refused", steps="from:60:12")


@on_build("decode_step")
def test_decode_steps_from_a_later_step_with_the_replay_cache_preloaded(small_trace):
    """FastCar from the middle of the second frame: the replay cache written from the trace first
    (its entries of the first frame's steps 36 on and of the second frame's before the run), so
    that the replays read what a run from step 0 would; bit-exact, with idle inputs, backpressure and
    memory pauses. The same run with every entry taken one step too early fails, naming the step,
    layer, block and row."""
    tr = load_full_step(small_trace, verify=False)
    replay = tr.t["replay"][100:108]
    assert 0 < replay.sum() < replay.size          # rows replayed from the preload, and rows computed
    run_decode_step(small_trace, "verilator", "preload", steps="from:100:8", preload=True, stall=0.2,
                    seed=32)
    with pytest.raises(CocotbFailure, match=r"step 10\d, layer \d, block decoder_layer, row \d, element"):
        run_decode_step(small_trace, "verilator", "preload-plant", steps="from:100:8",
                        preload=True, plant="preload")
