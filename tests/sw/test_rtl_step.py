"""sw.perf.rtl_step: the attended positions against the model's own mask, the bytes of a step (and
the system model's SDRAM term equal to them), and the cycle model's fit recovering known
coefficients (and failing on a wrong one), the video's first step's own term."""

import numpy as np
import pytest
import torch

from sw.model.fastcar import SparseConfig, attention_mask
from sw.perf import rtl_step

MANIFEST = {"dims": {"d_model": 96, "layers": 4, "batch": 4, "n_heads": 4, "head_dim": 24, "samples": 512,
                     "prompts": 2, "codebook": 512},
            "prompt_len": 5, "decode": {"sparse": {"sinks": 5, "window": 65}}}


def test_attended_is_the_masks_count():
    for sinks, window in ((5, 65), (2, 3), (0, 0)):
        sp = SparseConfig(sinks=sinks, window=window) if window else None
        for p in (0, 1, 4, 5, 66, 70, 200):
            mask = attention_mask(torch.tensor([p]), p + 1, sp)[0].numpy()
            assert rtl_step.attended(p, sinks, window) == int(mask.sum()) - 1


def test_step_bytes():
    got = rtl_step.step_bytes(MANIFEST, [0, 4, 5, 100], 64)
    # A prompt step: 4 int32 rows of 96; an image step adds the spatial rows; 48 bytes a key and value.
    # Weights, 8 x 8 blocks: a block is 3 words of constants (8 x 22 bits) and 12 beats of 8 words
    # (99 words); a layer is two norms (2 x 48 words) and 4 x 12 blocks; the head the final norm and
    # 64 blocks read once per prompt. The last prompt step (4) samples the first image token.
    layer = (2 * 48 + 48 * 99) * 8 * 4
    head = (48 + 2 * 64 * 99) * 8
    assert got.tolist() == [[1536 + layer, 64 * 48, layer],
                            [1536 + 64 * 4 * 48 + layer + head, 64 * 48, layer + head],
                            [3072 + 64 * 5 * 48 + layer + head, 64 * 48, layer + head],
                            [3072 + 64 * 69 * 48 + layer + head, 64 * 48, layer + head]]


def test_the_system_models_sdram_term_is_the_rtls():
    """The system model's SDRAM bytes with the placement the RTL has (the KV cache and the attention
    and LM head weights streamed, the MLP's resident) are the RTL's exact bytes over the image steps,
    with dense and with sparse attention."""
    from sw.perf import system_model as sm

    m = sm.Dims(frames=2)
    steps = range(m.prompt_len, m.positions)
    stats = sm.ReplayStats.dense(m)
    for sparse, man in ((True, MANIFEST), (False, {**MANIFEST, "decode": {"sparse": None}})):
        man = {**man, "dims": {**man["dims"], "samples": m.frames * m.tokens_per_frame}}
        c = sm.step_costs(m, sm.System(), sm.AS_BUILT, stats, sparse=sparse)
        assert c["sdram_bytes"] == rtl_step.step_bytes(man, steps, 64)[:, :2].sum()


def test_the_system_models_rtl_rows_are_the_cycle_model():
    """``system_model.rtl_as_built`` builds the same features from replay statistics as
    ``rtl_step.features`` does from a trace's decisions (FastCar with dense and sparse attention)."""
    from sw.perf import system_model as sm

    m = sm.Dims(frames=2)
    rng = np.random.default_rng(1)
    replay = rng.random((m.positions, m.layers, m.batch)) < 0.6
    img = replay[m.prompt_len:]
    stats = sm.ReplayStats((~img).sum(2), img.all(2), "test")
    coef = np.array([20000.0, 3000.0, 18.0, 1500.0, 400.0, 3600.0])
    rows = {r["mode"]: r for r in sm.rtl_as_built(m, sm.System(), stats, stats, coef)}
    man = {**MANIFEST, "dims": {**MANIFEST["dims"], "samples": m.frames * m.tokens_per_frame}}
    steps = range(m.prompt_len, m.positions)
    for mode, sparse in (("FastCar", None), ("FastCar + sparse attention", MANIFEST["decode"]["sparse"])):
        x = rtl_step.features({**man, "decode": {"sparse": sparse}}, replay, steps)
        assert np.isclose(rows[mode]["cycles"], rtl_step.predict(x, coef).sum(), rtol=1e-12, atol=0)


def test_the_video_start_term_is_the_first_steps_only():
    """``video_start`` is 1 on step 0 alone, in every mode; a wrong start term moves step 0's cycles
    and no other step's, and the fit finds it from step 0."""
    rng = np.random.default_rng(2)
    replay = rng.integers(0, 2, (80, 4, 4))
    k = rtl_step.FEATURES.index("video_start")
    for sparse in (MANIFEST["decode"]["sparse"], None):
        man = {**MANIFEST, "decode": {"sparse": sparse}}
        x = rtl_step.features(man, replay, range(80))
        assert x[:, k].tolist() == [1] + [0] * 79
        assert rtl_step.features(man, replay, [40, 0])[:, k].tolist() == [0, 1]
    coef = np.array([20000.0, 3000.0, 18.0, 1500.0, 400.0, 3600.0])
    y = rtl_step.predict(x, coef)
    wrong = rtl_step.predict(x, coef * [1, 1, 1, 1, 1, 0])
    assert wrong[0] == y[0] - 3600 and np.array_equal(wrong[1:], y[1:])
    assert np.allclose(rtl_step.fit(x, y), coef)
    assert len(rtl_step.CALIBRATED["coefficients"]) == len(rtl_step.FEATURES)


def test_fit_recovers_the_coefficients():
    rng = np.random.default_rng(0)
    replay = rng.integers(0, 2, (300, 4, 4))
    x = rtl_step.features(MANIFEST, replay, range(300))
    coef = np.array([20000.0, 3000.0, 18.0, 1500.0, 400.0, 3600.0])
    y = rtl_step.predict(x, coef)
    assert np.allclose(rtl_step.fit(x, y), coef)
    assert not np.allclose(rtl_step.predict(x, coef * [1, 1, 1.1, 1, 1, 1]), y)


def test_entry_bytes_is_the_step_memorys_layout():
    from hw.step.step_memory import kv_entry_words

    for head_dim in (8, 20, 24, 33):
        for dw in (32, 64, 128):
            assert rtl_step.entry_bytes(head_dim, dw) == kv_entry_words(head_dim, dw) * dw // 8


def test_weight_bytes_is_the_weight_streams_layout():
    """The weights' bytes in a step are :class:`WeightStream`'s image: every layer's words each step,
    the final norm's and the LM head's (read once per prompt) on a step that samples."""
    from hw.step.weight_stream import channel_words, head_words, layer_words

    dims = {"d_model": 96, "layers": 4, "prompts": 2, "codebook": 512}
    for mv in ((8, 8), (4, 16), (16, 4)):
        for dw in (32, 64, 128):
            layer = rtl_step.weight_bytes(dims, mv, dw, sample=False)
            assert layer == 4 * layer_words(96, *mv, dw) * dw // 8
            head = rtl_step.weight_bytes(dims, mv, dw, sample=True) - layer
            assert head == (channel_words(96, dw) + 2 * head_words(96, 512, *mv, dw)) * dw // 8


def test_the_calibrations_system_model_terms_on_later_steps():
    """``tb.step.calibrate`` compares the system model with RTL runs that start late or end the video:
    its SDRAM bytes over a run's image steps are the exact bytes there too (the LM head read on every
    step that samples, not on the last)."""
    from tb.step.calibrate import system_model_terms

    dims = {**MANIFEST["dims"], "d_ff": 256, "vocab": 529, "tokens_per_frame": 64, "steps": 517}
    for sparse in (MANIFEST["decode"]["sparse"], None):
        man = {**MANIFEST, "dims": dims, "decode": {"sparse": sparse}}
        for steps in (range(0, 85), range(261, 265), range(509, 517)):
            got = system_model_terms(man, np.zeros((517, 4, 4), np.uint8), list(steps), 2.8)["sdram_bytes"]
            img = [s for s in steps if s >= man["prompt_len"]]
            assert got == rtl_step.step_bytes(man, img, 64)[:, :2].sum(), (sparse, steps)


def test_the_whole_videos_cycles_are_the_cycle_model_over_every_step():
    """``system_model.rtl_video_cycles`` (prompt steps and image steps, from replay statistics) is
    ``rtl_step.features`` over every step of the video from a trace's decisions, with dense and with
    sparse attention; and moving one image row from replayed to computed changes it by the row's
    coefficient."""
    from sw.perf import system_model as sm

    m = sm.Dims(frames=2)
    rng = np.random.default_rng(3)
    replay = rng.random((m.positions, m.layers, m.batch)) < 0.6
    replay[: m.prompt_len + m.tokens_per_frame] = False                 # prompt and frame 0 compute
    img = replay[m.prompt_len:]
    stats = sm.ReplayStats((~img).sum(2), img.all(2), "test")
    coef = np.array([20000.0, 3000.0, 18.0, 1500.0, 400.0, 3600.0])
    man = {**MANIFEST, "dims": {**MANIFEST["dims"], "samples": m.frames * m.tokens_per_frame}}
    for sparse in ((5, 65), None):
        x = rtl_step.features({**man, "decode": {"sparse": None if sparse is None else
                                                 {"sinks": sparse[0], "window": sparse[1]}}},
                              replay, range(m.positions))
        got = sm.rtl_video_cycles(m, stats, sparse=sparse, coef=coef)
        assert np.isclose(got, rtl_step.predict(x, coef).sum(), rtol=1e-12, atol=0)
    s, layer = m.prompt_len + m.tokens_per_frame + 3, 1
    row = int(np.flatnonzero(replay[s, layer])[0])
    replay[s, layer, row] = False
    img = replay[m.prompt_len:]
    moved = sm.ReplayStats((~img).sum(2), img.all(2), "test")
    assert sm.rtl_video_cycles(m, moved, sparse=None, coef=coef) - got == pytest.approx(
        coef[3] + coef[4] * (img[s - m.prompt_len, layer].sum() == m.batch - 1))


def test_replay_stats_of_a_generation_run_batch_two_prompts_a_video():
    """``ReplayStats.from_decode`` groups a generation run's rows as the decode step batches them:
    prompts 2i and 2i + 1 with their unconditional rows; a last prompt left alone is padded with
    its own rows."""
    from sw.perf import system_model as sm

    L, F, N, n = 2, 2, 3, 3                                     # 3 prompts: rows 0-2 cond, 3-5 uncond
    rep = np.zeros((L, F, N, 2 * n), bool)
    rep[0, 1, 2, [0, 3, 1, 4]] = True                             # prompts 0 and 1 replay both rows
    rep[1, 1, 0, 2] = True                                        # prompt 2's conditional row
    a, b = sm.ReplayStats.from_decode(rep)
    assert a.computed_rows.shape == (F * N, L) and a.computed_rows[N + 2, 0] == 0 and a.all_replayed[N + 2, 0]
    assert a.computed_rows.sum() == F * N * L * 4 - 4 and b.computed_rows[N, 1] == 2
    assert not b.all_replayed.any() and b.computed_rows.sum() == F * N * L * 4 - 2
    with pytest.raises(ValueError, match="even"):
        sm.ReplayStats.from_decode(np.zeros((L, F, N, 3), bool))
