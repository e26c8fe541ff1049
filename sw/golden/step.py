"""The golden model of the whole decode step in integer arithmetic.

Everything between the token id and the logits runs on integers by the rules of :mod:`sw.spec.quant`
(``docs/quantization.md``, "The whole decoder layer"): the embedding into the int32 residual
stream, RMSNorm with an exact integer reciprocal square root, the q/k/v/o projections, RoPE from
int16 tables, int32 attention scores with a base-2 integer softmax, the MLP with FastCar replay
exactly as the accelerator runs it (the stored integer constants of :mod:`sw.golden.int8`), the
residual adds, the final norm and the LM head. The logits leave as ``acc * s_f * s_w`` for the
sampler, so that the float model and this one draw from the same random stream and their tokens
can be compared one for one.

:class:`IntegerDecoder` stands in for :class:`sw.model.decoder.Decoder` in :func:`sw.model.decoder.generate`
(``new_state``, ``prefill``, ``step``), with FastCar and sparse attention as in float.
``python -m sw.golden.step --prompts 24`` reports token agreement, PSNR and prompt following
against the float model on held-out prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from sw.model.fastcar import attention_mask
from sw.spec import quant


def _mult_shift(scale, shift_max: int = quant.SHIFT_MAX):
    m, s = quant.scale_to_mult_shift(np.asarray(scale, dtype=np.float64), shift_max=shift_max)
    return m, s


def exp_constant(s_q: float, s_k: float, head_dim: int) -> int:
    """The softmax's exponent constant: ``rint(s_q s_k / sqrt(head_dim) * log2(e) * 2**16)``."""
    return int(round(s_q * s_k / math.sqrt(head_dim) * math.log2(math.e) * (1 << quant.EXP_FRAC_BITS)))


def _weight(lin) -> tuple[np.ndarray, np.ndarray]:
    """int8 [in, out] weights (``y = x @ w``) per output channel, and their scales."""
    return quant.quantize_weight(lin.weight.detach().double().numpy().T)


@dataclass
class LayerConsts:
    n1: tuple                  # (mult, shift) [d]: input norm to s_n1
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    q: tuple                   # (mult, shift) [d]: q to s_q (before RoPE)
    k: tuple
    v: tuple
    a_exp: int                 # the softmax's exponent constant
    a_out: tuple               # (mult, shift): o / E to s_a
    wo: np.ndarray
    o: tuple                   # (mult, shift) [d]: attention output projection to residual units
    n2: tuple                  # post-attention norm to the MLP's s_x
    mlp: dict                  # the MLP's integer constants (sw.golden.int8)
    y: tuple                   # (mult, shift): the MLP's int8 output to residual units
    scales: dict = field(default_factory=dict)


@dataclass
class StepConsts:
    s_r: float
    eps: int
    emb: np.ndarray            # int32 [vocab, d]
    spatial: np.ndarray | None  # int32 [tokens_per_frame, d]
    layers: list
    nf: tuple
    head: np.ndarray           # int8 [d, vocab]
    head_scale: np.ndarray     # float [vocab]: logits = acc * head_scale
    rope_c: np.ndarray
    rope_s: np.ndarray
    exp_table: np.ndarray


def calibrate_step(model, ip, prompt_tokens, frames: int, *, uncond=None, cfg_scale=1.5, seed: int = 0,
                   headroom: float = 1.0) -> StepConsts:
    """Scales of every integer stage from a float rollout (amax per tensor and layer), then the
    integer constants. ``ip``: the MLP's stored integer path (:class:`sw.golden.calibrate.IntegerPath`)."""
    from sw.model.decoder import generate

    amax: dict = {}

    def upd(key, t):
        amax[key] = max(amax.get(key, 0.0), float(t.detach().abs().max()))

    hooks = []
    cfg = model.config
    h = cfg.head_dim // 2
    for li, layer in enumerate(model.layers):
        attn = layer.self_attn
        norm1 = layer.input_layernorm
        hooks.append(norm1.register_forward_pre_hook(lambda m, a, li=li: upd(("r", li), a[0])))
        hooks.append(layer.input_layernorm.register_forward_hook(lambda m, a, o, li=li: upd(("n1", li), o)))
        for name in ("q", "k"):
            def pair(m, a, o, li=li, name=name):
                x = o.reshape(*o.shape[:-1], -1, cfg.head_dim)
                upd((name, li), torch.sqrt(x[..., :h] ** 2 + x[..., h:] ** 2))   # what RoPE can reach
            hooks.append(getattr(attn, f"{name}_proj").register_forward_hook(pair))
        hooks.append(attn.v_proj.register_forward_hook(lambda m, a, o, li=li: upd(("v", li), o)))
        hooks.append(attn.o_proj.register_forward_pre_hook(lambda m, a, li=li: upd(("a", li), a[0])))
        hooks.append(layer.post_attention_layernorm.register_forward_pre_hook(
            lambda m, a, li=li: upd(("r2", li), a[0])))
    hooks.append(model.norm.register_forward_pre_hook(lambda m, a: upd(("r", "final"), a[0])))
    hooks.append(model.norm.register_forward_hook(lambda m, a, o: upd(("nf",), o)))
    try:
        with torch.no_grad():
            generate(model, prompt_tokens, frames, seed=seed, cfg_scale=cfg_scale,
                     uncond_prompt_tokens=uncond, progress=False)
    finally:
        for hk in hooks:
            hk.remove()

    def sc(a):
        return max(a, 1e-12) * headroom / quant.INT8_MAX

    r_max = max(v for k, v in amax.items() if k[0] in ("r", "r2"))
    s_r = r_max * 4 / (1 << 15)                       # int16-range residual with 4x headroom, held in int32
    d = cfg.d_model
    eps = int(round(cfg.norm_eps / (s_r * s_r)))

    def norm_consts(norm, s_out):
        """(mult, shift) of |gamma| * sqrt(d) / s_out, and gamma's sign, which the next matrix's
        rows take (an int8 weight in [-127, 127] changes sign exactly)."""
        g = norm.weight.detach().double().numpy()
        ms = _mult_shift(np.maximum(np.abs(g), 1e-12) * math.sqrt(d) / s_out,
                         quant.SHIFT_MAX - quant.RSQRT_BITS)
        return ms, np.where(g < 0, -1, 1).astype(np.int64)

    def signed(w, sign):
        if int(w.min()) < -quant.WEIGHT_QMAX:
            raise quant.QuantError("a weight of -128 cannot take a norm's sign")
        return (w.astype(np.int64) * sign[:, None]).astype(np.int8)

    layers = []
    for li, layer in enumerate(model.layers):
        attn = layer.self_attn
        s_n1, s_q, s_k, s_v, s_a = (sc(amax[(k, li)]) for k in ("n1", "q", "k", "v", "a"))
        wq, swq = _weight(attn.q_proj)
        wk, swk = _weight(attn.k_proj)
        wv, swv = _weight(attn.v_proj)
        wo, swo = _weight(attn.o_proj)
        Lr = ip.layers[li]
        s_x, s_y = Lr.scales["s_x"], Lr.scales["s_y"]
        n1, sg1 = norm_consts(layer.input_layernorm, s_n1)
        n2, sg2 = norm_consts(layer.post_attention_layernorm, s_x)
        wq, wk, wv = signed(wq, sg1), signed(wk, sg1), signed(wv, sg1)
        mlp = {**Lr.consts, "wg": signed(Lr.wg, sg2), "wu": signed(Lr.wu, sg2), "wd": Lr.wd}
        layers.append(LayerConsts(
            n1=n1, wq=wq, wk=wk, wv=wv,
            q=_mult_shift(s_n1 * swq / s_q), k=_mult_shift(s_n1 * swk / s_k),
            v=_mult_shift(s_n1 * swv / s_v), a_exp=exp_constant(s_q, s_k, cfg.head_dim),
            a_out=tuple(int(x[0]) for x in _mult_shift(s_v / s_a)), wo=wo, o=_mult_shift(s_a * swo / s_r),
            n2=n2, mlp=mlp,
            y=tuple(int(x[0]) for x in _mult_shift(s_y / s_r)),
            scales={"s_n1": s_n1, "s_q": s_q, "s_k": s_k, "s_v": s_v, "s_a": s_a, "s_x": s_x, "s_y": s_y}))
    s_f = sc(amax[("nf",)])
    nf, sgf = norm_consts(model.norm, s_f)
    head, sh = _weight(model.lm_head)
    head = signed(head, sgf)
    emb = np.rint(model.embed_tokens.weight.detach().double().numpy() / s_r).astype(np.int64)
    spatial = None
    if cfg.spatial_embedding:
        spatial = np.rint(model.embed_spatial.weight.detach().double().numpy() / s_r).astype(np.int64)
    cos = model.rope_cos.detach().double().numpy()
    sin = model.rope_sin.detach().double().numpy()
    rc, rs = quant.rope_tables_int(cos, sin)
    return StepConsts(s_r=s_r, eps=eps, emb=emb, spatial=spatial, layers=layers,
                      nf=nf, head=head, head_scale=s_f * sh, rope_c=rc, rope_s=rs,
                      exp_table=quant.exp2_table())


class IntegerDecoder:
    """Duck-typed :class:`sw.model.decoder.Decoder` for :func:`sw.model.decoder.generate`: the whole step
    in integers.

    ``thresholds``: the integer TAS threshold of every layer (for FastCar; the ``tau`` of the
    decode state's FastCar settings is not read). With ``record`` a list, every step appends what
    the full-step trace holds (:mod:`sw.trace.full_step`). ``integer_logits``: each step returns
    the LM head's int32 accumulators (int64 tensor) for :class:`sw.golden.sampling.IntegerSampler`,
    instead of the float logits ``acc * s_f * s_w``.
    """

    def __init__(self, config, consts: StepConsts, thresholds, *, record: list | None = None,
                 integer_logits: bool = False):
        import types

        self.c, self.thresholds, self.record = consts, [int(t) for t in thresholds], record
        self.integer_logits = bool(integer_logits)
        self.config = config
        self.embed_tokens = types.SimpleNamespace(weight=torch.zeros(1))

    def new_state(self, batch_size, *, capacity=None, fastcar=None, sparse=None, recorder=None, frames=8,
                  frame_start=None):
        from sw.model.decoder import DecodeState

        cfg = self.config
        st = DecodeState(cfg, batch_size, capacity or cfg.max_seq_len, fastcar=fastcar, sparse=sparse,
                         recorder=None, frames=frames, frame_start=frame_start, dtype=torch.float32,
                         device=torch.device("cpu"))
        shape = (batch_size, cfg.n_heads, st.capacity, cfg.head_dim)
        st.ik = [np.zeros(shape, np.int64) for _ in self.c.layers]
        st.iv = [np.zeros_like(st.ik[0]) for _ in self.c.layers]
        st.icache = np.zeros((len(self.c.layers), cfg.tokens_per_frame, batch_size, cfg.d_model), np.int8)
        st.ichain = np.zeros((len(self.c.layers), cfg.tokens_per_frame, batch_size), np.int64)
        return st

    def prefill(self, tokens, state):
        tokens = tokens.cpu().numpy()
        for j in range(tokens.shape[1]):
            logits = self._step(tokens[:, j], state, frame=None, index=None)
        state.frame_start = state.pos
        return logits

    def step(self, token, state):
        n = self.config.tokens_per_frame
        frame, index = divmod(state.pos - state.frame_start, n)
        return self._step(token.cpu().numpy(), state, frame=frame, index=index)

    def _step(self, token, state, *, frame, index):
        c, cfg, p = self.c, self.config, state.pos
        B, H, dh = len(token), cfg.n_heads, cfg.head_dim
        r = c.emb[token].copy()
        if c.spatial is not None and frame is not None:
            r += c.spatial[index]
        fc, sparse = state.fastcar, state.sparse
        replaying = fc is not None and frame is not None and frame >= 1
        rows_rep, rows_forced, rows_tas = [], [], []
        # The positions attended: the float model's own mask (causal, or sinks + window).
        attended = [np.flatnonzero(attention_mask(torch.tensor([p]), p + 1, sparse)[0].numpy())]
        rec = None if self.record is None else {
            "token": np.asarray(token, np.int64), "pos": p,
            **{k: [] for k in ("r_in", "q", "k", "v", "attn", "r_mid", "m", "tas", "replay", "y", "r_out")}}
        for li, L in enumerate(c.layers):
            if rec is not None:
                rec["r_in"].append(r.copy())
            xn = quant.rmsnorm_int(r, *L.n1, c.eps)
            q = quant.requantize(quant.matmul_int(xn, L.wq), *L.q).reshape(B, H, dh)
            k = quant.requantize(quant.matmul_int(xn, L.wk), *L.k).reshape(B, H, dh)
            v = quant.requantize(quant.matmul_int(xn, L.wv), *L.v).reshape(B, H, dh)
            q = quant.rope_int(q, c.rope_c[p], c.rope_s[p])
            k = quant.rope_int(k, c.rope_c[p], c.rope_s[p])
            state.ik[li][:, :, p], state.iv[li][:, :, p] = k, v
            pos = attended[0]
            keys, vals = state.ik[li][:, :, pos], state.iv[li][:, :, pos]
            scores = np.einsum("bhe,bhpe->bhp", q.astype(np.int64), keys)
            o, E = quant.softmax_av_int(scores, vals, L.a_exp, c.exp_table)
            a = quant.attention_out_int(o, E, *L.a_out).reshape(B, H * dh)
            r = quant.saturate(r + quant.requant_wide(quant.matmul_int(a, L.wo), *L.o), quant.RESIDUAL_BITS)
            m_in = quant.rmsnorm_int(r, *L.n2, c.eps)
            if rec is not None:
                for key, val in (("q", q), ("k", k), ("v", v), ("attn", a), ("r_mid", r.copy()), ("m", m_in)):
                    rec[key].append(val)
            # FastCar: the TAS against the same position one frame earlier, the one replay rule.
            replay = np.zeros(B, bool)
            if fc is not None and frame is not None and frame >= 1:
                tas = quant.tas_int(q, state.ik[li][:, :, p - cfg.tokens_per_frame])
                want = quant.replay_decision(tas, self.thresholds[li])
                chain = state.ichain[li, index] if fc.max_chain is not None else None
                replay, forced, new = quant.replay_guard(want, frame, chain, refresh_every=fc.refresh_every,
                                                         max_chain=fc.max_chain)
                if new is not None:
                    state.ichain[li, index] = new
                rows_rep.append(torch.as_tensor(replay))
                rows_forced.append(torch.as_tensor(forced))
                rows_tas.append(torch.as_tensor(tas.astype(np.float32)))
            if fc is None or frame is None:
                y = quant.swiglu_int8(m_in, L.mlp["wg"], L.mlp["wu"], L.mlp["wd"], L.mlp)
                n_keep = B
            else:
                y = state.icache[li, index].copy()
                keep = np.flatnonzero(~replay)
                if keep.size:
                    y[keep] = quant.swiglu_int8(m_in[keep], L.mlp["wg"], L.mlp["wu"], L.mlp["wd"], L.mlp)
                state.icache[li, index] = y
                n_keep = keep.size
            state.mlp_calls[li] += int(n_keep > 0)
            state.mlp_rows[li] += n_keep
            state.step_rows[li] += B
            r = quant.saturate(r + quant.requant_wide(y, *L.y), quant.RESIDUAL_BITS)
            if rec is not None:
                rec["tas"].append(quant.tas_int(q, state.ik[li][:, :, p - cfg.tokens_per_frame])
                                  if frame is not None and frame >= 1 else np.zeros(B, np.int64))
                rec["replay"].append(replay.astype(np.uint8))
                rec["y"].append(np.asarray(y, np.int8))
                rec["r_out"].append(r.copy())
        state.pos = p + 1
        if frame is not None:
            state._ensure_frame(frame)
            state._filled[frame, index] = True
            if replaying:
                state._replayed[:, frame, index] = torch.stack(rows_rep)
                state._forced[:, frame, index] = torch.stack(rows_forced)
                state._tas[:, frame, index] = torch.stack(rows_tas)
        xf = quant.rmsnorm_int(r, *c.nf, c.eps)
        acc = quant.matmul_int(xf, c.head)
        if rec is not None:
            rec["logits"] = acc
            self.record.append(rec)
        if self.integer_logits:
            return torch.as_tensor(acc, dtype=torch.int64)
        return torch.as_tensor(acc * c.head_scale, dtype=torch.float32)


def integer_sampler(config, consts: StepConsts, *, seed: int = 0, batch: int = 1, cfg_scale=None,
                    temperature: float = 1.0, record: list | None = None, logit=None):
    """:class:`sw.golden.sampling.IntegerSampler` over the image tokens of ``config``, with the LM
    head's scales of ``consts`` (or the stored ``logit=(mult, shift)``)."""
    from sw.golden.sampling import IntegerSampler

    lo = config.image_token_offset
    scale = None if logit is not None else np.asarray(consts.head_scale)[lo:lo + config.codebook_size]
    return IntegerSampler(scale, logit=logit, seed=seed, batch=batch, cfg_scale=cfg_scale,
                          temperature=temperature, record=record)


def step_vs_float(ckpt, prompts, *, frames: int = 8, cfg_scale: float = 1.5, seed: int = 0, calibration=None,
                  fastcar=None, sparse=None, sampler: str = "int") -> dict:
    """Generate ``prompts`` with the float model and with the integer whole step (same seed);
    token agreement, PSNR of the decoded frames and prompt following of both.

    ``sampler``: ``"int"`` (default) draws the integer step's tokens on-chip style
    (:class:`sw.golden.sampling.IntegerSampler`) and the float model's by the same race in float
    (:class:`~sw.golden.sampling.GumbelSampler`, the same words); ``"torch"`` samples both with
    ``generate``'s softmax and ``torch.multinomial`` from the integer step's float logits."""
    if sampler not in ("int", "torch"):
        raise ValueError(f"sampler must be 'int' or 'torch', not {sampler!r}")
    from sw.golden.calibrate import calibrate, compare_rollouts
    from sw.golden.int8 import load_for_checkpoint
    from sw.model.decoder import generate

    model, lay = ckpt.model, ckpt.layout
    try:
        ip, _ = load_for_checkpoint(ckpt.path / "int8.safetensors", ckpt)
    except Exception:
        cal_c, cal_u = lay.prompt_batch(calibration or prompts)
        ip = calibrate(model, cal_c, frames, seed=seed, cfg_scale=cfg_scale, uncond_prompt_tokens=cal_u)
    cal_c, cal_u = lay.prompt_batch(calibration or prompts)
    consts = calibrate_step(model, ip, cal_c, frames, uncond=cal_u, cfg_scale=cfg_scale, seed=seed)
    cond, uncond = lay.prompt_batch(prompts)
    kw = dict(seed=seed, cfg_scale=cfg_scale, uncond_prompt_tokens=uncond, progress=False, fastcar=fastcar,
              sparse=sparse)
    th = [ip.threshold(li, fastcar.layer_taus(len(consts.layers))[li], strict=fastcar.strict)
          if fastcar is not None else quant.THRESHOLD_NEVER for li in range(len(consts.layers))]
    with torch.no_grad():
        if sampler == "torch":
            f_tok, _ = generate(model, cond, frames, **kw)
            i_tok, stats = generate(IntegerDecoder(model.config, consts, th), cond, frames, **kw)
        else:
            from sw.golden.sampling import GumbelSampler
            f_tok, _ = generate(model, cond, frames, **kw,
                                sampler=GumbelSampler(seed=seed, batch=len(cond), cfg_scale=cfg_scale))
            dec = IntegerDecoder(model.config, consts, th, integer_logits=True)
            i_tok, stats = generate(dec, cond, frames, **kw, sampler=integer_sampler(
                model.config, consts, seed=seed, batch=len(cond), cfg_scale=cfg_scale))
    return {**compare_rollouts(ckpt, prompts, f_tok, i_tok),
            "replay_ratio": float(stats.replay_ratio()) if fastcar is not None else None}


def main(argv=None) -> int:
    import argparse
    import json
    import sys

    from sw.golden.calibrate import calibration_prompts
    from sw.model import data
    from sw.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
    from sw.model.fastcar import FastCarConfig, SparseConfig

    ap = argparse.ArgumentParser(prog="python -m sw.golden.step",
                                 description="The integer whole decode step against float.")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--tau", type=float, default=None, help="FastCar threshold (default: dense)")
    ap.add_argument("--window", type=int, default=None, help="sparse attention window")
    ap.add_argument("--sinks", type=int, default=5, help="sparse attention sinks (default: the prompt's 5)")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--sampler", choices=("int", "torch"), default="int",
                    help="int: the on-chip integer sampler and its float twin on the same draws (default); "
                         "torch: softmax and torch.multinomial for both")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    held = data.heldout_prompts()
    if not 1 <= args.prompts <= len(held):
        ap.error(f"--prompts must be in [1, {len(held)}] (the compositional held-out prompts)")
    prompts = held[:args.prompts]
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT)
    ckpt.model.set_max_seq_len(max(ckpt.model.config.max_seq_len,
                                   ckpt.layout.prompt_len + args.frames * ckpt.layout.tokens_per_frame))
    res = step_vs_float(ckpt, prompts, frames=args.frames, calibration=calibration_prompts(),
                        fastcar=FastCarConfig(tau=args.tau) if args.tau is not None else None,
                        sparse=SparseConfig(sinks=args.sinks, window=args.window) if args.window else None,
                        sampler=args.sampler)
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
