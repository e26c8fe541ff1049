"""Tests of the PyTorch decoder, its KV-cache decode, FastCar replay and sparse attention."""

import json
import math

import pytest
import torch

from sw.model.decoder import (
    Decoder,
    FastCarConfig,
    ModelConfig,
    ModelConfigError,
    SparseConfig,
    generate,
)
from sw.model.fastcar import FastCarConfigError, sparse_attention_mask, temporal_attention_score

INF = math.inf


N = 4  # tokens per frame
PROMPT = 3
FRAMES = 3


def tiny_config(**overrides) -> ModelConfig:
    fields = dict(vocab_size=40, d_model=32, n_layers=2, n_heads=2, d_ff=64, tokens_per_frame=N,
                  prompt_len=PROMPT, max_seq_len=PROMPT + 8 * N, image_token_offset=8, codebook_size=16)
    fields.update(overrides)
    return ModelConfig(**fields)


def tiny_model(seed: int = 0, **overrides) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(tiny_config(**overrides), init_std=0.3).eval()


def random_tokens(batch: int, frames: int = FRAMES, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 40, (batch, PROMPT + frames * N), generator=g)


def teacher_forced(model, tokens, **state_kwargs):
    """Prefill the prompt, then step every frame token; return logits [B, 1 + frame tokens, V] and state."""
    state = model.new_state(tokens.shape[0], **state_kwargs)
    logits = [model.prefill(tokens[:, :PROMPT], state)]
    for j in range(PROMPT, tokens.shape[1]):
        logits.append(model.step(tokens[:, j], state))
    return torch.stack(logits, dim=1), state


class MLPRowCounter:
    """Forward hooks on every layer's MLP that count the rows it really processes."""

    def __init__(self, model):
        self.rows = [0] * len(model.layers)
        self.handles = [layer.mlp.register_forward_hook(self._hook(i))
                        for i, layer in enumerate(model.layers)]

    def _hook(self, index):
        def hook(module, args, output):
            self.rows[index] += args[0].reshape(-1, args[0].shape[-1]).shape[0]
        return hook

    def reset(self):
        self.rows = [0] * len(self.rows)

    def remove(self):
        for h in self.handles:
            h.remove()


def direct_rope(x, positions, theta=10000.0):
    """RoPE written out pair by pair: dims (m, m + dh/2) rotate by angle p * theta^(-2m/dh)."""
    dh = x.shape[-1]
    half = dh // 2
    out = torch.empty_like(x)
    for m in range(half):
        angle = positions.double() * theta ** (-2.0 * m / dh)
        c, s = angle.cos().float(), angle.sin().float()
        a, b = x[..., m], x[..., m + half]
        out[..., m] = a * c - b * s
        out[..., m + half] = b * c + a * s
    return out


# --- configuration ---------------------------------------------------------------------------------


def test_config_roundtrip_and_defaults(tmp_path):
    c = ModelConfig(vocab_size=300)
    assert (c.d_model, c.n_layers, c.n_heads, c.d_ff, c.head_dim) == (96, 4, 4, 256, 24)
    assert c.max_seq_len == 6 + 8 * 64 and c.n_kv_heads == 4
    p = tmp_path / "model.json"
    p.write_text(json.dumps(c.to_dict()))
    assert ModelConfig.from_json(p) == c


@pytest.mark.parametrize("fields,msg", [
    ({"vocab_size": 300, "depth": 3}, r"unknown model config field\(s\) \['depth'\]"),
    ({"d_model": 96}, "'vocab_size' is missing"),
    ({"vocab_size": 300, "d_model": 30}, "d_model=30 is not a multiple of n_heads=4"),
    ({"vocab_size": 300, "d_model": 20, "n_heads": 4}, "head_dim=5 .* must be even"),
    ({"vocab_size": 300, "n_kv_heads": 3}, "n_heads=4 is not a multiple of n_kv_heads=3"),
    ({"vocab_size": 100}, r"image tokens \[0, 256\) do not fit in vocab_size=100"),
    ({"vocab_size": 300, "norm_eps": -1}, "'norm_eps' must be a finite number > 0"),
    ({"vocab_size": 300, "n_layers": True}, "'n_layers' must be a positive integer"),
])
def test_bad_model_config_is_refused(tmp_path, fields, msg):
    p = tmp_path / "model.json"
    p.write_text(json.dumps(fields))
    with pytest.raises(ModelConfigError, match=f"model.json: .*{msg}"):
        ModelConfig.from_json(p)


def test_config_file_errors(tmp_path):
    with pytest.raises(ModelConfigError, match="no such config file"):
        ModelConfig.from_json(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text("{")
    with pytest.raises(ModelConfigError, match="bad.json: not valid JSON"):
        ModelConfig.from_json(p)


@pytest.mark.parametrize("kwargs,msg", [
    ({"tau": math.nan}, "tau values must be real numbers"),
    ({"tau": []}, "non-empty list"),
    ({"tau": 0.0, "score": "cosine"}, "score must be one of"),
    ({"tau": 0.0, "refresh_every": 0}, "refresh_every must be None or an integer >= 1"),
    ({"tau": 0.0, "max_chain": -1}, "max_chain must be None or an integer >= 0"),
])
def test_bad_fastcar_config_is_refused(kwargs, msg):
    with pytest.raises(FastCarConfigError, match=msg):
        FastCarConfig(**kwargs)


def test_per_layer_tau_length_is_checked():
    model = tiny_model()
    with pytest.raises(FastCarConfigError, match="3 values but the model has 2 layers"):
        model.new_state(1, fastcar=FastCarConfig(tau=[0.0, 0.0, 0.0]))


# --- dense decode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_kv_cache_decode_equals_full_forward(n_kv_heads):
    overrides = {} if n_kv_heads is None else {"n_heads": 4, "n_kv_heads": n_kv_heads}
    model = tiny_model(**overrides)
    tokens = random_tokens(3)
    with torch.no_grad():
        full = model(tokens)
    decoded, state = teacher_forced(model, tokens)
    assert state.pos == tokens.shape[1] and state.frame_start == PROMPT
    torch.testing.assert_close(decoded, full[:, PROMPT - 1 :], atol=1e-5, rtol=1e-5)
    assert state.keys(0).shape == (3, model.config.n_kv_heads, tokens.shape[1], model.config.head_dim)


def test_step_beyond_max_seq_len_is_refused_and_can_be_extended():
    model = tiny_model(max_seq_len=PROMPT + 2 * N)
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        generate(model, random_tokens(1)[:, :PROMPT], 3, progress=False)
    model.set_max_seq_len(PROMPT + 3 * N)
    tokens = random_tokens(2)
    decoded, _ = teacher_forced(model, tokens)
    with torch.no_grad():
        torch.testing.assert_close(decoded, model(tokens)[:, PROMPT - 1 :], atol=1e-5, rtol=0)


# --- FastCar ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["logit", "reference"])
def test_tas_matches_direct_computation(score):
    model = tiny_model()
    cfg = model.config
    tokens = random_tokens(2)
    records = []
    teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF, score=score), recorder=records.append)
    # Layer 0 straight from the embeddings, with RoPE written out by hand.
    layer = model.layers[0]
    with torch.no_grad():
        h = layer.input_layernorm(model.embed_tokens(tokens))
        b, t = tokens.shape
        q = layer.self_attn.q_proj(h).view(b, t, cfg.n_heads, cfg.head_dim)
        k = layer.self_attn.k_proj(h).view(b, t, cfg.n_heads, cfg.head_dim)
        positions = torch.arange(t)
        q_rot = direct_rope(q.transpose(1, 2), positions).transpose(1, 2)
        k_rot = direct_rope(k.transpose(1, 2), positions).transpose(1, 2)
    q_used = q_rot if score == "logit" else q
    checked = 0
    for rec in records:
        if rec.frame == 0:
            assert rec.q is None and rec.k_prev is None and rec.tas is None
            continue
        # Every layer: the score is the head-averaged scaled dot product of the recorded q and k_prev.
        expected = (rec.q * rec.k_prev).sum(-1).mean(-1) / math.sqrt(cfg.head_dim)
        torch.testing.assert_close(rec.tas, expected, atol=1e-6, rtol=1e-6)
        if rec.layer == 0:
            p = rec.pos
            torch.testing.assert_close(rec.k_prev, k_rot[:, p - N], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(rec.q, q_used[:, p], atol=1e-5, rtol=1e-5)
            dots = torch.einsum("bhd,bhd->bh", q_used[:, p], k_rot[:, p - N])
            direct = dots.mean(-1) / math.sqrt(cfg.head_dim)
            torch.testing.assert_close(rec.tas, direct, atol=1e-5, rtol=1e-5)
            checked += 1
    assert checked == (FRAMES - 1) * N


def test_reference_score_differs_from_logit_score():
    model = tiny_model()
    tokens = random_tokens(2)
    _, logit_state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF, score="logit"))
    _, ref_state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF, score="reference"))
    a, b = logit_state.stats().tas, ref_state.stats().tas
    assert torch.isnan(a[:, 0]).all() and torch.isnan(b[:, 0]).all()
    assert torch.isfinite(a[:, 1:]).all() and torch.isfinite(b[:, 1:]).all()
    assert (a[:, 1:] - b[:, 1:]).abs().max() > 1e-3


def test_tau_plus_inf_is_bit_identical_to_dense():
    model = tiny_model()
    tokens = random_tokens(3)
    counter = MLPRowCounter(model)
    dense, _ = teacher_forced(model, tokens)
    dense_rows = list(counter.rows)
    counter.reset()
    fast, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF))
    assert torch.equal(dense, fast)
    assert counter.rows == dense_rows == [3 * (PROMPT + FRAMES * N)] * 2
    stats = state.stats()
    assert not stats.replayed.any() and stats.mlp_rows == stats.step_rows == [3 * FRAMES * N] * 2
    counter.remove()
    out_dense, _ = generate(model, tokens[:, :PROMPT], FRAMES, progress=False, seed=3)
    out_fast, _ = generate(model, tokens[:, :PROMPT], FRAMES, progress=False, seed=3,
                           fastcar=FastCarConfig(tau=INF))
    assert torch.equal(out_dense, out_fast)


def test_tau_minus_inf_replays_every_token_after_frame_0():
    model = tiny_model()
    tokens = random_tokens(2)
    counter = MLPRowCounter(model)
    records = []
    _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=-INF), recorder=records.append)
    stats = state.stats()
    assert stats.replayed.shape == (2, FRAMES, N, 2)
    assert not stats.replayed[:, 0].any() and stats.replayed[:, 1:].all()
    assert stats.replay_ratio() == pytest.approx((FRAMES - 1) / FRAMES)
    # The MLP saw the prompt (prefill) and frame 0 only; replay steps made no MLP call at all.
    assert counter.rows == [2 * (PROMPT + N)] * 2
    assert stats.mlp_calls == [N] * 2 and stats.mlp_rows == [2 * N] * 2
    computed, dense = stats.mlp_flops()
    assert computed * FRAMES == dense
    # Chaining: every replayed output is the frame-0 output of the same layer and position.
    first = {(r.layer, r.index): r.mlp_out for r in records if r.frame == 0}
    for r in records:
        assert torch.equal(r.mlp_out, first[(r.layer, r.index)])
        assert bool(r.replay.all()) == (r.frame > 0)
    counter.remove()


def test_strict_and_non_strict_at_equality():
    model = tiny_model()
    tokens = random_tokens(1)
    records = []
    teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF), recorder=records.append)
    # First replay decision of layer 0: (frame 1, index 0); everything before it is dense.
    first = next(r for r in records if r.layer == 0 and r.frame == 1 and r.index == 0)
    s = float(first.tas[0])
    for strict, expected in ((False, True), (True, False)):
        _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=[s, INF], strict=strict))
        stats = state.stats()
        assert float(stats.tas[0, 1, 0, 0]) == s
        assert bool(stats.replayed[0, 1, 0, 0]) is expected


def test_refresh_every_computes_every_kth_frame():
    model = tiny_model(max_seq_len=PROMPT + 6 * N)
    tokens = random_tokens(2, frames=6)
    _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=-INF, refresh_every=3))
    stats = state.stats()
    computed_frames = [t for t in range(6) if not stats.replayed[:, t].any()]
    replayed_frames = [t for t in range(6) if stats.replayed[:, t].all()]
    assert computed_frames == [0, 3] and replayed_frames == [1, 2, 4, 5]
    assert stats.forced[:, 3].all() and not stats.forced[:, [0, 1, 2, 4, 5]].any()
    assert stats.replay_ratio() == pytest.approx(4 / 6)


@pytest.mark.parametrize("max_chain,pattern", [
    (2, [False, True, True, False, True, True]),
    (1, [False, True, False, True, False, True]),
    (0, [False] * 6),
])
def test_max_chain_limits_consecutive_replays(max_chain, pattern):
    model = tiny_model(max_seq_len=PROMPT + 6 * N)
    tokens = random_tokens(2, frames=6)
    _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=-INF, max_chain=max_chain))
    stats = state.stats()
    for t, replays in enumerate(pattern):
        assert (stats.replayed[:, t] == replays).all(), t
        assert (stats.forced[:, t] == (t > 0 and not replays)).all(), t


def test_partial_replay_gathers_and_scatters_rows():
    model = tiny_model(seed=2)
    batch = 6
    tokens = random_tokens(batch, seed=5)
    dense_records = []
    teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF), recorder=dense_records.append)
    taus = [float(torch.cat([r.tas for r in dense_records if r.layer == li and r.frame > 0]).median())
            for li in range(2)]
    counter = MLPRowCounter(model)
    records = []
    _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=taus), recorder=records.append)
    counter.remove()
    by_pos = {(r.layer, r.pos): r for r in records}
    mixed = 0
    for r in records:
        keep = ~r.replay
        if r.frame == 0:
            assert keep.all()
        if keep.any() and not keep.all():
            mixed += 1
        with torch.no_grad():
            fresh = model.layers[r.layer].mlp(r.x[keep])
        # Computed rows: the MLP of exactly those rows; replayed rows: the output used one frame earlier.
        torch.testing.assert_close(r.mlp_out[keep], fresh, atol=1e-6, rtol=1e-6)
        if r.replay.any():
            previous = by_pos[(r.layer, r.pos - N)]
            assert torch.equal(r.mlp_out[r.replay], previous.mlp_out[r.replay])
        if r.frame > 0:
            assert torch.equal(r.replay, r.tas >= taus[r.layer])
    assert mixed > 0
    stats = state.stats()
    rows_computed = [int((~stats.replayed[li]).sum()) for li in range(2)]
    assert stats.mlp_rows == rows_computed
    assert counter.rows == [batch * PROMPT + rc for rc in rows_computed]
    assert 0 < stats.replay_ratio() < 1


# --- sparse attention -------------------------------------------------------------------------------


def test_sparse_attention_mask():
    mask = sparse_attention_mask(8, SparseConfig(sinks=2, window=3))
    expected = torch.zeros(8, 8, dtype=torch.bool)
    for p in range(8):
        for j in range(p + 1):
            expected[p, j] = j < 2 or p - j < 3
    assert torch.equal(mask, expected)
    assert torch.equal(sparse_attention_mask(5, None), torch.ones(5, 5, dtype=torch.bool).tril())
    assert mask[7].tolist() == [True, True, False, False, False, True, True, True]


@pytest.mark.parametrize("sinks,window", [(2, 3), (0, 1), (1, 5)])
def test_sparse_decode_equals_masked_forward(sinks, window):
    model = tiny_model()
    tokens = random_tokens(2)
    sparse = SparseConfig(sinks=sinks, window=window)
    with torch.no_grad():
        full = model(tokens, attn_mask=sparse_attention_mask(tokens.shape[1], sparse))
        dense = model(tokens)
    decoded, _ = teacher_forced(model, tokens, sparse=sparse)
    torch.testing.assert_close(decoded, full[:, PROMPT - 1 :], atol=1e-5, rtol=1e-5)
    assert (full - dense).abs().max() > 1e-3


def test_sparse_attention_with_fastcar():
    model = tiny_model()
    tokens = random_tokens(2)
    sparse = SparseConfig(sinks=1, window=4)
    alone, _ = teacher_forced(model, tokens, sparse=sparse)
    with_inf, _ = teacher_forced(model, tokens, sparse=sparse, fastcar=FastCarConfig(tau=INF))
    assert torch.equal(alone, with_inf)
    _, state = teacher_forced(model, tokens, sparse=sparse, fastcar=FastCarConfig(tau=-INF))
    assert state.stats().replayed[:, 1:].all()


# --- generation -------------------------------------------------------------------------------------


def test_generation_is_deterministic_for_a_seed():
    model = tiny_model()
    prompt = random_tokens(2)[:, :PROMPT]
    a, stats = generate(model, prompt, FRAMES, seed=7, progress=False)
    b, _ = generate(model, prompt, FRAMES, seed=7, progress=False)
    c, _ = generate(model, prompt, FRAMES, seed=8, progress=False)
    assert a.shape == (2, FRAMES, N) and torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= 8 and a.max() < 8 + 16
    assert stats.filled.all() and stats.replayed.shape == (2, FRAMES, N, 2)
    greedy, _ = generate(model, prompt, FRAMES, temperature=0, progress=False)
    top1, _ = generate(model, prompt, FRAMES, top_k=1, seed=11, progress=False)
    assert torch.equal(greedy, top1)


def test_classifier_free_guidance():
    model = tiny_model()
    prompt = random_tokens(2)[:, :PROMPT]
    uncond = torch.zeros(1, PROMPT, dtype=torch.int64)
    out, stats = generate(model, prompt, FRAMES, cfg_scale=3.0, uncond_prompt_tokens=uncond, seed=1,
                          fastcar=FastCarConfig(tau=0.0), progress=False)
    assert out.shape == (2, FRAMES, N) and stats.replayed.shape == (2, FRAMES, N, 4)
    # Scale 0 keeps only the unconditional logits: the same video as decoding the unconditional prompt.
    zero, _ = generate(model, prompt, FRAMES, cfg_scale=0.0, uncond_prompt_tokens=uncond, temperature=0,
                       progress=False)
    plain, _ = generate(model, uncond.expand(2, -1), FRAMES, temperature=0, progress=False)
    assert torch.equal(zero, plain)
    with pytest.raises(ValueError, match="cfg_scale needs uncond_prompt_tokens"):
        generate(model, prompt, FRAMES, cfg_scale=3.0, progress=False)


def test_mlp_override_is_used():
    model = tiny_model()
    tokens = random_tokens(2)
    reference, _ = teacher_forced(model, tokens)
    calls = []

    def same_mlp(layer, x):
        calls.append((layer, x.shape[0]))
        return model.layers[layer].mlp(x)

    model.set_mlp_override(same_mlp)
    overridden, _ = teacher_forced(model, tokens)
    assert torch.equal(overridden, reference)
    assert calls[0] == (0, 2 * PROMPT) and len(calls) == 2 * (1 + FRAMES * N)
    # Under replay the override only receives the rows that compute.
    calls.clear()
    teacher_forced(model, tokens, fastcar=FastCarConfig(tau=-INF))
    assert sum(rows for _, rows in calls) == 2 * 2 * (PROMPT + N)
    # A zero MLP equals a model whose down projections are zero.
    model.set_mlp_override(lambda layer, x: torch.zeros_like(x))
    zeroed, _ = teacher_forced(model, tokens)
    model.set_mlp_override(None)
    with torch.no_grad():
        for layer in model.layers:
            layer.mlp.down_proj.weight.zero_()
    torch.testing.assert_close(zeroed, teacher_forced(model, tokens)[0], atol=0, rtol=0)
    assert (zeroed - reference).abs().max() > 1e-3
    model.set_mlp_override(lambda layer, x: x[:, :3])
    with pytest.raises(ValueError, match="MLP override of layer 0 returned shape"):
        teacher_forced(model, tokens)


def test_replay_rule_replaces_the_comparison():
    model = tiny_model()
    tokens = random_tokens(2)
    seen = []

    def rule(layer, q, k_prev, tau, strict):
        seen.append((layer, q.clone(), k_prev.clone(), tau, strict))
        return torch.tensor([True, False])  # row 0 always replays, row 1 never

    model.set_replay_rule(rule)
    records = []
    _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=[1.5, 2.5], strict=True),
                              recorder=records.append)
    stats = state.stats()
    assert stats.replayed[:, 1:, :, 0].all() and not stats.replayed[:, :, :, 1].any()
    assert len(seen) == 2 * (FRAMES - 1) * N
    decided = [r for r in records if r.frame > 0]
    for (layer, q, k_prev, tau, strict), rec in zip(seen, decided, strict=True):
        assert layer == rec.layer and tau == [1.5, 2.5][layer] and strict is True
        assert torch.equal(q, rec.q) and torch.equal(k_prev, rec.k_prev)
    model.set_replay_rule(lambda *args: torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="replay rule of layer 0 returned"):
        teacher_forced(model, tokens, fastcar=FastCarConfig(tau=0.0))


def test_score_helper_matches_definition():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 4, 8, generator=g), torch.randn(3, 4, 8, generator=g)
    expected = torch.tensor([sum(float(q[b, h] @ k[b, h]) for h in range(4)) / 4 / math.sqrt(8)
                             for b in range(3)])
    torch.testing.assert_close(temporal_attention_score(q, k), expected, atol=1e-5, rtol=1e-5)


def test_spatial_embedding_decode_matches_forward():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, d_ff=48, tokens_per_frame=4,
                      prompt_len=3, codebook_size=32, spatial_embedding=True)
    model = Decoder(cfg).eval()
    assert model.embed_spatial.weight.shape == (4, 32)
    tokens = torch.randint(0, 32, (2, 3 + 3 * 4))
    full = model(tokens)
    state = model.new_state(2)
    model.prefill(tokens[:, :3], state)
    for p in range(3, tokens.shape[1] - 1):
        step_logits = model.step(tokens[:, p], state)
        torch.testing.assert_close(step_logits, full[:, p], rtol=1e-5, atol=1e-5)
    # The embedding matters: without it the logits differ.
    model.embed_spatial.weight.data.zero_()
    assert not torch.allclose(model(tokens)[:, 5], full[:, 5])


def test_float64_decoder_is_the_float32_one_in_more_bits():
    """`sw.golden.calibrate.use_float64` (what the trace export runs): RoPE tables, norms, decode and sampling
    stay in float64 and agree with the float32 model to float32 precision."""
    from sw.golden.calibrate import use_float64
    from sw.model.decoder import rope_tables

    cos32, sin32 = rope_tables(64, 16, 10000.0)
    cos64, sin64 = rope_tables(64, 16, 10000.0, torch.float64)
    assert cos64.dtype == torch.float64 and torch.allclose(cos64.float(), cos32, atol=2e-5)
    assert torch.allclose(sin64.float(), sin32, atol=2e-5)
    m32, m64 = tiny_model(), tiny_model()
    use_float64(m64)
    assert m64.rope_cos.dtype == torch.float64 and m64.layers[0].mlp.gate_proj.weight.dtype == torch.float64
    tokens = random_tokens(2)
    l32, l64 = m32(tokens), m64(tokens)
    assert l64.dtype == torch.float64 and torch.allclose(l64.float(), l32, atol=1e-4)
    prompt = tokens[:, :PROMPT]
    t32, _ = generate(m32, prompt, 2, seed=3, progress=False)
    t64, _ = generate(m64, prompt, 2, seed=3, progress=False)
    assert torch.equal(t32, t64)


@pytest.mark.parametrize("tau", [0.0, 0.3, 0.8])
def test_replay_aware_forward_equals_the_decode_step(tau):
    """forward(replay_tau=) replays exactly as step() does under teacher forcing (same decisions,
    same chained outputs), so replay-aware training trains the model that decoding runs."""
    model = tiny_model(seed=3)
    tokens = random_tokens(3, frames=4, seed=5)
    recs = []
    logits, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=tau), recorder=recs.append)
    assert 0 < state.stats().replay_ratio() < 0.75, "pick a tau where some tokens replay and some do not"
    full = model(tokens, replay_tau=tau)
    # logits[:, 0] follow the prompt; logits[:, j] follow frame token j - 1.
    torch.testing.assert_close(full[:, PROMPT - 1:], logits, rtol=1e-4, atol=1e-4)
    dense = model(tokens)
    assert not torch.allclose(full, dense, atol=1e-3)


def test_replay_aware_forward_carries_gradient_to_the_selected_outputs():
    model = tiny_model(seed=3).train()
    tokens = random_tokens(2, frames=3, seed=5)
    model(tokens, replay_tau=-INF).sum().backward()
    assert all(p.grad is not None for p in model.layers[0].mlp.parameters())


def _reference_change_decisions(recs, tau, n_layers):
    """Replay decisions of score="input" recomputed from the recorder: the relative L2 change of the
    MLP input against the input of the last frame that computed (same layer, index and row)."""
    ref = {}
    for r in recs:
        for b in range(r.x.shape[0]):
            key = (r.layer, r.index, b)
            if r.frame == 0:
                assert not r.replay[b]
                ref[key] = r.x[b].clone()
                continue
            d = float((r.x[b] - ref[key]).norm() / ref[key].norm())
            assert bool(r.replay[b]) == (d <= tau), (key, r.frame, d)
            assert float(r.tas[b]) == pytest.approx(d, rel=1e-5)
            if not r.replay[b]:
                ref[key] = r.x[b].clone()


@pytest.mark.parametrize("tau", [1.0, 1.3])
def test_input_change_score_replays_where_the_input_moved_least(tau):
    model = tiny_model(seed=4)
    tokens = random_tokens(3, frames=4, seed=2)
    recs = []
    _, state = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=tau, score="input"),
                              recorder=recs.append)
    replay = state.stats().replay_ratio()
    assert 0 < replay < 0.75
    _reference_change_decisions([r for r in recs if r.frame is not None], tau, 2)


@pytest.mark.parametrize("score", ["input", "oracle"])
def test_change_scores_at_the_extremes(score):
    model = tiny_model(seed=4)
    tokens = random_tokens(2, frames=3, seed=2)
    dense, _ = teacher_forced(model, tokens)
    never, st = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=-1.0, score=score))
    assert st.stats().replay_ratio() == 0.0
    torch.testing.assert_close(never, dense, rtol=0, atol=0)
    _, st = teacher_forced(model, tokens, fastcar=FastCarConfig(tau=INF, score=score))
    assert st.stats().replay_ratio() == pytest.approx((3 - 1) / 3)


def test_oracle_score_is_the_change_of_the_mlp_output():
    """The oracle's score is the relative change of the fresh MLP output against the cached one."""
    model = tiny_model(seed=6)
    tokens = random_tokens(2, frames=3, seed=3)
    recs = []
    teacher_forced(model, tokens, fastcar=FastCarConfig(tau=1.2, score="oracle"), recorder=recs.append)
    cache = {}
    seen = 0
    for r in (r for r in recs if r.frame is not None):
        fresh = model.layers[r.layer].mlp(r.x)
        for b in range(r.x.shape[0]):
            key = (r.layer, r.index, b)
            if r.frame > 0:
                d = float((fresh[b] - cache[key]).norm() / cache[key].norm())
                assert bool(r.replay[b]) == (d <= 1.2) and float(r.tas[b]) == pytest.approx(d, rel=1e-4)
                seen += bool(r.replay[b])
            cache[key] = r.mlp_out[b].clone()
    assert seen > 0


def test_replay_fraction_in_training():
    """replay_fraction=1 replays every token after frame 0, 0 is dense; both thresholds at once are refused."""
    model = tiny_model(seed=3)
    tokens = random_tokens(2, frames=3, seed=5)
    torch.testing.assert_close(model(tokens, replay_fraction=1.0), model(tokens, replay_tau=-INF))
    torch.testing.assert_close(model(tokens, replay_fraction=0.0), model(tokens))
    assert not torch.allclose(model(tokens, replay_fraction=0.5), model(tokens), atol=1e-4)
    with pytest.raises(ValueError, match="not both"):
        model(tokens, replay_tau=0.0, replay_fraction=0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        model(tokens, replay_fraction=1.5)
