"""LLaMA-style decoder with a KV-cache decode step, FastCar replay and sparse attention.

The network is the LLaMA architecture at a small size: token embedding, ``n_layers`` blocks of
``RMSNorm -> multi-head attention with RoPE -> residual`` and ``RMSNorm -> SwiGLU MLP -> residual``,
a final RMSNorm and an untied LM head. Parameter names are those of Hugging Face LLaMA without the
``model.`` prefix (``embed_tokens``, ``layers.{i}.self_attn.q_proj``, ``layers.{i}.mlp.gate_proj``,
``layers.{i}.input_layernorm``, ``norm``, ``lm_head``...), so :mod:`sw.model.hf_loader` loads a
checkpoint without renaming. Grouped-query attention (``n_kv_heads < n_heads``) is supported.

Three ways to run it:

* :meth:`Decoder.forward` — the whole sequence at once, causal (training, reference logits);
* :meth:`Decoder.prefill` and :meth:`Decoder.step` — incremental decode with a :class:`DecodeState`
  (KV cache, FastCar replay cache, statistics); :meth:`Decoder.step` is where FastCar skips MLP rows;
* :func:`generate` — prompt in, ``frames x tokens_per_frame`` image tokens out, with optional
  classifier-free guidance, FastCar, sparse attention and a per-layer recorder.

FastCar in :meth:`Decoder.step` (see :mod:`sw.model.fastcar` for the rule): rows that replay are *not*
sent through the MLP. The rows that compute are gathered with ``index_select``, run through the MLP
as one smaller batch (no call at all when every row replays) and scattered with ``index_copy_``
into the layer's replay-cache slot, which then holds the output used for ``(t, i)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from sw.config import ConfigError
from sw.model.fastcar import (
    DISTANCE_SCORES,
    DecodeStats,
    FastCarConfig,
    SparseConfig,
    StepRecord,
    attention_mask,
    mlp_flops_per_row,
    temporal_attention_score,
)
from sw.spec import quant

__all__ = [
    "DecodeState",
    "Decoder",
    "FastCarConfig",
    "ModelConfig",
    "ModelConfigError",
    "SparseConfig",
    "StepRecord",
    "DecodeStats",
    "generate",
]

#: ``fn(layer_index, x[rows, d_model]) -> [rows, d_model]``, replaces every layer's MLP.
MLPOverride = Callable[[int, torch.Tensor], torch.Tensor]
#: Called once per (layer, decode step) with a :class:`~sw.model.fastcar.StepRecord`.
Recorder = Callable[[StepRecord], None]
#: ``fn(layer_index, q[B, H, dh], k_prev[B, H, dh], tau, strict) -> bool [B]``, replaces the float
#: comparison ``tas >= tau`` (e.g. by the integer decision of the golden model).
ReplayRule = Callable[[int, torch.Tensor, torch.Tensor, float, bool], torch.Tensor]


class ModelConfigError(ConfigError):
    """A model configuration that cannot be built."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the decoder and of the token layout it generates.

    Parameters
    ----------
    vocab_size : int
        Number of token ids (codebook entries, text words and special tokens).
    d_model : int
        Hidden size.
    n_layers : int
        Number of decoder blocks.
    n_heads : int
        Number of query heads; ``d_model / n_heads`` must be an even integer (RoPE).
    d_ff : int
        Inner size of the SwiGLU MLP.
    max_seq_len : int or None
        Longest sequence (RoPE tables and default KV-cache size). ``None`` means
        ``prompt_len + 8 * tokens_per_frame``. It holds no weights, so
        :meth:`Decoder.set_max_seq_len` can raise it after training (e.g. 64-frame drift studies).
    rope_theta : float
        RoPE base.
    norm_eps : float
        RMSNorm epsilon.
    tokens_per_frame : int
        ``N``, tokens in one frame.
    prompt_len : int
        Number of prompt positions before frame 0 (e.g. BOS plus 5 word tokens).
    n_kv_heads : int or None
        Key/value heads (grouped-query attention); ``None`` means ``n_heads``.
    image_token_offset : int
        First token id of the image codebook.
    codebook_size : int
        Number of image token ids; frame tokens are sampled from
        ``[image_token_offset, image_token_offset + codebook_size)``.
    spatial_embedding : bool
        Add a learned embedding of the in-frame position ``(p - prompt_len) mod tokens_per_frame``
        (weight ``embed_spatial``) to every frame token. RoPE alone only tells relative distance;
        this tells a token where in the frame grid it sits. Not part of HF LLaMA (off for
        loaded checkpoints).
    """

    vocab_size: int
    d_model: int = 96
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 256
    max_seq_len: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tokens_per_frame: int = 64
    prompt_len: int = 6
    n_kv_heads: int | None = None
    image_token_offset: int = 0
    codebook_size: int = 256
    spatial_embedding: bool = False

    def __post_init__(self):
        def fail(msg):
            raise ModelConfigError(f"model config: {msg}")

        positive = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "tokens_per_frame",
                    "codebook_size")
        for name in positive:
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                fail(f"'{name}' must be a positive integer, not {value!r}")
        for name in ("prompt_len", "image_token_offset"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                fail(f"'{name}' must be an integer >= 0, not {value!r}")
        if self.max_seq_len is None:
            object.__setattr__(self, "max_seq_len", self.prompt_len + 8 * self.tokens_per_frame)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        for name in ("max_seq_len", "n_kv_heads"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                fail(f"'{name}' must be a positive integer (or null), not {value!r}")
        for name in ("rope_theta", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or value <= 0:
                fail(f"'{name}' must be a finite number > 0, not {value!r}")
            object.__setattr__(self, name, float(value))
        if self.d_model % self.n_heads:
            fail(f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}")
        if self.head_dim % 2:
            fail(f"head_dim={self.head_dim} (d_model / n_heads) must be even for RoPE")
        if self.n_heads % self.n_kv_heads:
            fail(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.image_token_offset + self.codebook_size > self.vocab_size:
            fail(f"image tokens [{self.image_token_offset}, {self.image_token_offset + self.codebook_size}) "
                 f"do not fit in vocab_size={self.vocab_size}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        """Return the configuration as a JSON-serialisable dict (defaults filled in)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "config") -> ModelConfig:
        """Build a configuration from a dict, refusing unknown fields.

        Parameters
        ----------
        d : dict
            Field values.
        source : str
            Name used in error messages (e.g. the file name).

        Returns
        -------
        ModelConfig

        Raises
        ------
        ModelConfigError
            On unknown, missing or invalid fields.
        """
        if not isinstance(d, dict):
            raise ModelConfigError(f"{source}: expected a JSON object, not {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ModelConfigError(
                f"{source}: unknown model config field(s) {unknown}; known: {sorted(known)}")
        if "vocab_size" not in d:
            raise ModelConfigError(f"{source}: model config field 'vocab_size' is missing")
        try:
            return cls(**d)
        except ModelConfigError as e:
            raise ModelConfigError(f"{source}: {e}") from None

    @classmethod
    def from_json(cls, path) -> ModelConfig:
        """Read a configuration from a JSON file (see :meth:`from_dict`)."""
        try:
            with open(path) as f:
                d = json.load(f)
        except FileNotFoundError:
            raise ModelConfigError(f"{path}: no such config file") from None
        except json.JSONDecodeError as e:
            raise ModelConfigError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(d, source=str(path))


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """Root-mean-square layer norm with a learned gain (computed in float32, as HF LLaMA; in
    float64 when the input is float64)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension of ``x``."""
        dtype = x.dtype
        x32 = x if dtype == torch.float64 else x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class Attention(nn.Module):
    """Projections of multi-head attention (the attention itself is computed by :class:`Decoder`)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d, dh = config.d_model, config.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, dh
        self.q_proj = nn.Linear(d, config.n_heads * dh, bias=False)
        self.k_proj = nn.Linear(d, config.n_kv_heads * dh, bias=False)
        self.v_proj = nn.Linear(d, config.n_kv_heads * dh, bias=False)
        self.o_proj = nn.Linear(config.n_heads * dh, d, bias=False)


class MLP(nn.Module):
    """SwiGLU MLP ``down(silu(gate(x)) * up(x))`` without biases."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.down_proj = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP to the last dimension of ``x``."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One pre-norm block: attention and MLP, each with an RMSNorm in front and a residual add."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.norm_eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension (the HF LLaMA RoPE convention)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` by RoPE: ``x * cos + rotate_half(x) * sin`` (``cos``/``sin`` broadcast)."""
    return x * cos + rotate_half(x) * sin


def rope_tables(max_seq_len: int, head_dim: int, theta: float, dtype: torch.dtype = torch.float32,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE cosine and sine tables, computed as HF LLaMA does (float32), or in float64.

    The float64 tables are computed with Python's scalar ``math`` functions rather than vectorised
    kernels, so that they do not depend on the CPU's instruction set.

    Parameters
    ----------
    max_seq_len : int
        Number of positions.
    head_dim : int
        Head width (even).
    theta : float
        RoPE base.

    dtype : torch.dtype
        ``torch.float32`` (training, generation) or ``torch.float64`` (trace export).

    Returns
    -------
    cos, sin : torch.Tensor
        ``dtype`` [max_seq_len, head_dim]; the two halves of each row are equal.
    """
    if dtype == torch.float64:
        inv = [1.0 / theta ** (i / head_dim) for i in range(0, head_dim, 2)]
        ang = [[p * f for f in inv] * 2 for p in range(max_seq_len)]
        cos = torch.tensor([[math.cos(a) for a in row] for row in ang], dtype=torch.float64)
        sin = torch.tensor([[math.sin(a) for a in row] for row in ang], dtype=torch.float64)
        return cos.reshape(max_seq_len, head_dim), sin.reshape(max_seq_len, head_dim)
    if dtype != torch.float32:
        raise ValueError(f"RoPE tables are float32 or float64, not {dtype}")
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.arange(max_seq_len, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


# ---------------------------------------------------------------------------------------------
# Decode state
# ---------------------------------------------------------------------------------------------


class DecodeState:
    """Everything an incremental decode carries from one step to the next.

    Create it with :meth:`Decoder.new_state`.

    Attributes
    ----------
    k, v : list of torch.Tensor
        Per layer, the key (after RoPE) and value caches, preallocated as
        [B, n_kv_heads, capacity, head_dim]; positions ``0 .. pos - 1`` are valid
        (:meth:`keys`, :meth:`values`).
    pos : int
        Number of positions processed so far (the position of the next token).
    frame_start : int or None
        Position of token ``(0, 0)``; :meth:`Decoder.prefill` sets it to the prompt length.
    fastcar : FastCarConfig or None
    sparse : SparseConfig or None
    recorder : callable or None
    taus : list of float or None
        Per-layer FastCar thresholds.
    replay_cache : torch.Tensor or None
        float [L, N, B, d_model]: for layer ``l``, in-frame index ``i`` and batch row ``b``, the MLP
        output (before the residual add) that was *used* for ``(t - 1, i)`` — fresh or replayed —
        and, after the step of ``(t, i)``, the one used for ``(t, i)``. Only with FastCar.
    input_ref : torch.Tensor or None
        float [L, N, B, d_model]: the MLP input that produced each cached output (only with
        ``score="input"``).
    chain : torch.Tensor or None
        int32 [L, N, B]: consecutive replays of each token (only with ``max_chain``).
    mlp_calls, mlp_rows, step_rows : list of int
        Per layer, MLP invocations, rows computed, and rows processed by decode steps.
    """

    def __init__(self, config: ModelConfig, batch_size: int, capacity: int, *, fastcar: FastCarConfig | None,
                 sparse: SparseConfig | None, recorder: Recorder | None, frames: int, frame_start: int | None,
                 dtype: torch.dtype, device: torch.device):
        n_layers, n = config.n_layers, config.tokens_per_frame
        shape = (batch_size, config.n_kv_heads, capacity, config.head_dim)
        self.config = config
        self.batch_size = batch_size
        self.capacity = capacity
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.pos = 0
        self.frame_start = frame_start
        self.fastcar = fastcar
        self.sparse = sparse
        self.recorder = recorder
        self.taus = fastcar.layer_taus(n_layers) if fastcar is not None else None
        self.replay_cache = None
        self.input_ref = None
        self.chain = None
        if fastcar is not None:
            self.replay_cache = torch.zeros(n_layers, n, batch_size, config.d_model, dtype=dtype,
                                            device=device)
            if fastcar.score == "input":
                self.input_ref = torch.zeros_like(self.replay_cache)
            if fastcar.max_chain is not None:
                self.chain = torch.zeros(n_layers, n, batch_size, dtype=torch.int32, device=device)
        self.mlp_calls = [0] * n_layers
        self.mlp_rows = [0] * n_layers
        self.step_rows = [0] * n_layers
        frames = max(frames, 1)
        self._replayed = torch.zeros(n_layers, frames, n, batch_size, dtype=torch.bool)
        self._forced = torch.zeros(n_layers, frames, n, batch_size, dtype=torch.bool)
        self._tas = torch.full((n_layers, frames, n, batch_size), math.nan)
        self._filled = torch.zeros(frames, n, dtype=torch.bool)

    def keys(self, layer: int) -> torch.Tensor:
        """Valid cached keys of ``layer``: [B, n_kv_heads, pos, head_dim] (a view)."""
        return self.k[layer][:, :, : self.pos]

    def values(self, layer: int) -> torch.Tensor:
        """Valid cached values of ``layer``: [B, n_kv_heads, pos, head_dim] (a view)."""
        return self.v[layer][:, :, : self.pos]

    def _ensure_frame(self, t: int) -> None:
        have = self._filled.shape[0]
        if t < have:
            return
        grow = max(t + 1, 2 * have) - have
        def extend(buffer: torch.Tensor, fill, dim: int) -> torch.Tensor:
            shape = list(buffer.shape)
            shape[dim] = grow
            return torch.cat([buffer, torch.full(shape, fill, dtype=buffer.dtype)], dim=dim)

        self._replayed = extend(self._replayed, False, 1)
        self._forced = extend(self._forced, False, 1)
        self._tas = extend(self._tas, math.nan, 1)
        self._filled = extend(self._filled, False, 0)

    def stats(self) -> DecodeStats:
        """Replay decisions, scores and MLP work so far (frames after the last filled one are cut).

        Returns
        -------
        DecodeStats
            Tensors are copies; layout [L, F, N, B] (see :class:`~sw.model.fastcar.DecodeStats`).
        """
        rows = self._filled.any(1).nonzero()
        frames = int(rows.max()) + 1 if rows.numel() else 0
        return DecodeStats(
            replayed=self._replayed[:, :frames].clone(),
            forced=self._forced[:, :frames].clone(),
            tas=self._tas[:, :frames].clone(),
            filled=self._filled[:frames].clone(),
            mlp_calls=list(self.mlp_calls),
            mlp_rows=list(self.mlp_rows),
            step_rows=list(self.step_rows),
            d_model=self.config.d_model,
            d_ff=self.config.d_ff,
        )


# ---------------------------------------------------------------------------------------------
# The decoder
# ---------------------------------------------------------------------------------------------


class Decoder(nn.Module):
    """LLaMA-style decoder-only transformer (see the module docstring).

    Parameters
    ----------
    config : ModelConfig
        Sizes.
    init_std : float
        Standard deviation of the normal initialisation of embeddings and linear layers.
    """

    def __init__(self, config: ModelConfig, *, init_std: float = 0.02):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        if config.spatial_embedding:
            self.embed_spatial = nn.Embedding(config.tokens_per_frame, config.d_model)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = rope_tables(config.max_seq_len, config.head_dim, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._mlp_override: MLPOverride | None = None
        self._replay_rule: ReplayRule | None = None
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=init_std)

    # -- configuration -------------------------------------------------------------------------

    def _embed(self, tokens: torch.Tensor, p0: int) -> torch.Tensor:
        """Token embeddings of ``tokens`` [B, T] at positions ``p0 ..``, plus the in-frame position
        embedding for frame tokens when the config asks for it."""
        x = self.embed_tokens(tokens)
        if self.config.spatial_embedding:
            pos = torch.arange(p0, p0 + tokens.shape[1], device=tokens.device)
            frame_tok = pos >= self.config.prompt_len
            idx = (pos - self.config.prompt_len).remainder(self.config.tokens_per_frame)
            x = x + self.embed_spatial(idx) * frame_tok[:, None].to(x.dtype)
        return x

    def set_max_seq_len(self, max_seq_len: int) -> None:
        """Recompute the RoPE tables for a new maximum length and update :attr:`config`.

        Parameters
        ----------
        max_seq_len : int
            New maximum sequence length (no weights depend on it).
        """
        self.config = dataclasses.replace(self.config, max_seq_len=max_seq_len)
        cos, sin = rope_tables(max_seq_len, self.config.head_dim, self.config.rope_theta, self.rope_cos.dtype)
        self.rope_cos = cos.to(self.rope_cos.device)
        self.rope_sin = sin.to(self.rope_sin.device)

    def set_mlp_override(self, fn: MLPOverride | None) -> None:
        """Replace every layer's MLP by ``fn(layer_index, x[rows, d_model]) -> [rows, d_model]``.

        The override is used by :meth:`forward`, :meth:`prefill` and :meth:`step` (in the decode step
        it receives only the rows that are not replayed). ``None`` restores the layers' own MLPs.
        """
        if fn is not None and not callable(fn):
            raise TypeError(f"MLP override must be callable or None, not {type(fn).__name__}")
        self._mlp_override = fn

    def set_replay_rule(self, fn: ReplayRule | None) -> None:
        """Replace the FastCar score comparison by ``fn(layer, q, k_prev, tau, strict) -> bool [B]``.

        ``q`` and ``k_prev`` are the tensors the TAS is computed from (see
        :class:`~sw.model.fastcar.StepRecord`); ``True`` asks for replay. The drift guard still applies on
        top, and the statistics still record the float TAS. ``None`` restores ``tas >= tau``
        (``tas > tau`` when strict).
        """
        if fn is not None and not callable(fn):
            raise TypeError(f"replay rule must be callable or None, not {type(fn).__name__}")
        self._replay_rule = fn

    @property
    def mlp_flops_per_row(self) -> int:
        """FLOPs of one MLP row (2 per multiply-add)."""
        return mlp_flops_per_row(self.config.d_model, self.config.d_ff)

    def _mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        if self._mlp_override is None:
            return self.layers[layer].mlp(x)
        flat = x.reshape(-1, x.shape[-1])
        y = self._mlp_override(layer, flat)
        y = torch.as_tensor(y, dtype=x.dtype, device=x.device)
        if y.shape != flat.shape:
            raise ValueError(f"MLP override of layer {layer} returned shape {tuple(y.shape)}, "
                             f"expected {tuple(flat.shape)}")
        return y.reshape(x.shape)

    def _check_tokens(self, tokens: torch.Tensor, what: str) -> None:
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{what} must be an integer tensor, not {tokens.dtype}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size):
            raise ValueError(f"{what} has ids outside [0, {self.config.vocab_size})")

    def _change(self, layer: int, state: DecodeState, index: int, m_in: torch.Tensor) -> torch.Tensor:
        """[B] relative L2 change of a distance score (:data:`sw.model.fastcar.DISTANCE_SCORES`).

        ``"input"``: the MLP input ``m_in`` against the input that produced the cached output;
        ``"oracle"``: the fresh MLP output against the cached output.
        """
        if state.fastcar.score == "input":
            new, old = m_in, state.input_ref[layer, index]
        else:
            new, old = self._mlp(layer, m_in), state.replay_cache[layer, index]
        return (new - old).norm(dim=-1) / old.norm(dim=-1).clamp_min(torch.finfo(old.dtype).tiny)

    # -- full sequence -------------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, attn_mask: torch.Tensor | None = None, *,
                replay_tau: float | None = None, replay_fraction: float | None = None) -> torch.Tensor:
        """Causal forward pass over whole sequences.

        Parameters
        ----------
        tokens : torch.Tensor
            int64 [B, T], ``T <= max_seq_len``.
        attn_mask : torch.Tensor or None
            Optional bool [T, T] mask (``True`` = may attend), e.g. from
            :func:`sw.model.fastcar.sparse_attention_mask`; ``None`` is plain causal attention.
        replay_tau : float or None
            Replay-aware training: FastCar's rule applied in the teacher-forced pass, as
            :meth:`step` applies it (``score="logit"``, replay where ``tas >= replay_tau``, frame 0
            computes, the replayed output is the one used one frame earlier, so replay chains).
            The decisions carry no gradient; the outputs they select do. ``None``: dense.
        replay_fraction : float or None
            Instead of ``replay_tau``: in every layer, replay the fraction ``replay_fraction`` of
            the tokens after frame 0 with the highest TAS in this batch (the threshold is that
            quantile of the layer's scores). Training at a replay ratio rather than a threshold
            keeps the ratio where it is meant to be while the scores move.

        Returns
        -------
        torch.Tensor
            float [B, T, vocab_size] logits.
        """
        self._check_tokens(tokens, "tokens")
        if replay_tau is not None and replay_fraction is not None:
            raise ValueError("forward: give replay_tau or replay_fraction, not both")
        if replay_fraction is not None and not 0.0 <= replay_fraction <= 1.0:
            raise ValueError(f"forward: replay_fraction must be in [0, 1], not {replay_fraction!r}")
        b, t = tokens.shape
        if t > self.config.max_seq_len:
            raise ValueError(f"sequence of {t} tokens exceeds max_seq_len={self.config.max_seq_len}")
        x = self._embed(tokens, 0)
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, t, attn.n_heads, attn.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(b, t, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(b, t, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=attn_mask is None,
                                               enable_gqa=attn.n_kv_heads != attn.n_heads)
            x = x + attn.o_proj(a.transpose(1, 2).reshape(b, t, -1))
            y = self._mlp(index, layer.post_attention_layernorm(x))
            if replay_tau is not None or replay_fraction is not None:
                y = self._replay_teacher_forced(y, q, k, replay_tau, replay_fraction)
            x = x + y
        return self.lm_head(self.norm(x))

    def _replay_teacher_forced(self, y: torch.Tensor, q: torch.Tensor, k: torch.Tensor, tau: float | None,
                               fraction: float | None) -> torch.Tensor:
        """MLP outputs ``y`` [B, T, d] with FastCar replay applied frame by frame (see :meth:`forward`).

        ``q``, ``k``: [B, H, T, dh] after RoPE. The score of token ``(f, i)`` is
        :func:`~sw.model.fastcar.temporal_attention_score` of its query and the key of ``(f - 1, i)``.
        """
        cfg = self.config
        fs, n = cfg.prompt_len, cfg.tokens_per_frame
        frames = (y.shape[1] - fs) // n
        if frames < 2:
            return y
        if cfg.n_kv_heads != cfg.n_heads:
            k = k.repeat_interleave(cfg.n_heads // cfg.n_kv_heads, dim=1)
        end = fs + frames * n
        qf = q[:, :, fs + n:end].detach().transpose(1, 2)      # [B, (F-1) N, H, dh]
        kf = k[:, :, fs:end - n].detach().transpose(1, 2)      # the same positions one frame earlier
        score = temporal_attention_score(qf, kf).view(y.shape[0], frames - 1, n)
        if fraction is not None:
            tau = math.inf if fraction == 0 else float(torch.quantile(score.float().flatten(), 1 - fraction))
        used = [y[:, fs:fs + n]]
        for f in range(1, frames):
            p0 = fs + f * n
            used.append(torch.where((score[:, f - 1] >= tau)[..., None], used[-1], y[:, p0:p0 + n]))
        return torch.cat([y[:, :fs], *used, y[:, end:]], dim=1)

    # -- incremental decode --------------------------------------------------------------------

    def new_state(self, batch_size: int, *, capacity: int | None = None, fastcar: FastCarConfig | None = None,
                  sparse: SparseConfig | None = None, recorder: Recorder | None = None, frames: int = 8,
                  frame_start: int | None = None) -> DecodeState:
        """Allocate an empty decode state.

        Parameters
        ----------
        batch_size : int
            Rows decoded together (with classifier-free guidance: twice the number of videos).
        capacity : int or None
            KV-cache length; ``None`` means ``max_seq_len``.
        fastcar : FastCarConfig or None
            Replay settings; ``None`` is dense decoding.
        sparse : SparseConfig or None
            Sparse attention; ``None`` is dense attention.
        recorder : callable or None
            Called with a :class:`~sw.model.fastcar.StepRecord` per (layer, decode step).
        frames : int
            Expected number of frames (statistics buffers grow if more are decoded).
        frame_start : int or None
            Position of token ``(0, 0)``; ``None`` lets :meth:`prefill` set it to the prompt length.

        Returns
        -------
        DecodeState
        """
        capacity = self.config.max_seq_len if capacity is None else capacity
        if not _is_int(capacity) or not 1 <= capacity <= self.config.max_seq_len:
            raise ValueError(
                f"capacity must be in [1, max_seq_len={self.config.max_seq_len}], not {capacity!r}")
        if not _is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
        if fastcar is not None and not isinstance(fastcar, FastCarConfig):
            raise TypeError(f"fastcar must be a FastCarConfig or None, not {type(fastcar).__name__}")
        if sparse is not None and not isinstance(sparse, SparseConfig):
            raise TypeError(f"sparse must be a SparseConfig or None, not {type(sparse).__name__}")
        weight = self.embed_tokens.weight
        return DecodeState(self.config, batch_size, capacity, fastcar=fastcar, sparse=sparse,
                           recorder=recorder, frames=frames, frame_start=frame_start, dtype=weight.dtype,
                           device=weight.device)

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Process the prompt in one pass, fill the KV cache and set ``state.frame_start``.

        Prompt positions are never replayed and the recorder is not called.

        Parameters
        ----------
        tokens : torch.Tensor
            int64 [B, L] prompt tokens, ``L >= 1``.
        state : DecodeState
            State to extend (normally empty).

        Returns
        -------
        torch.Tensor
            float [B, vocab_size] logits of the last prompt position.
        """
        self._check_tokens(tokens, "prompt tokens")
        b, length = tokens.shape
        if b != state.batch_size or length < 1:
            raise ValueError(
                f"prefill expects [{state.batch_size}, L >= 1] tokens, got {tuple(tokens.shape)}")
        p0 = state.pos
        if state.frame_start is not None and p0 + length > state.frame_start:
            raise ValueError(f"prefill would cover frame positions (frame_start={state.frame_start}); "
                             "frame tokens must go through step()")
        if p0 + length > state.capacity:
            raise ValueError(f"prefill of {length} tokens at position {p0} exceeds capacity {state.capacity}")
        end = p0 + length
        mask = None
        if p0 > 0 or state.sparse is not None:
            mask = attention_mask(torch.arange(p0, end), end, state.sparse).to(tokens.device)
        cos, sin = self.rope_cos[p0:end], self.rope_sin[p0:end]
        x = self._embed(tokens, p0)
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, length, attn.n_heads, attn.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(b, length, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(b, length, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            state.k[index][:, :, p0:end] = k
            state.v[index][:, :, p0:end] = v
            a = F.scaled_dot_product_attention(q, state.k[index][:, :, :end], state.v[index][:, :, :end],
                                               attn_mask=mask, is_causal=mask is None,
                                               enable_gqa=attn.n_kv_heads != attn.n_heads)
            x = x + attn.o_proj(a.transpose(1, 2).reshape(b, length, -1))
            x = x + self._mlp(index, layer.post_attention_layernorm(x))
        state.pos = end
        if state.frame_start is None:
            state.frame_start = end
        return self.lm_head(self.norm(x[:, -1]))

    @torch.no_grad()
    def step(self, token: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Process one position for all rows, with FastCar replay and sparse attention if enabled.

        Parameters
        ----------
        token : torch.Tensor
            int64 [B], the token at position ``state.pos``.
        state : DecodeState
            Decode state; advanced by one position.

        Returns
        -------
        torch.Tensor
            float [B, vocab_size] logits predicting the next token.
        """
        cfg = self.config
        b, n, p = state.batch_size, cfg.tokens_per_frame, state.pos
        self._check_tokens(token, "token")
        if token.shape != (b,):
            raise ValueError(f"step expects a token tensor of shape [{b}], got {tuple(token.shape)}")
        if p >= state.capacity:
            raise ValueError(f"position {p} is beyond the decode capacity {state.capacity} "
                             f"(max_seq_len={cfg.max_seq_len}; see Decoder.set_max_seq_len)")
        fc, recorder = state.fastcar, state.recorder
        if state.frame_start is None:
            if fc is not None or recorder is not None:
                raise ValueError("FastCar and the recorder need state.frame_start: call prefill() first "
                                 "or pass frame_start to new_state()")
            frame = index = None
        elif p < state.frame_start:
            frame = index = None
        else:
            frame, index = divmod(p - state.frame_start, n)
        has_prev = frame is not None and frame >= 1
        distance = fc is not None and fc.score in DISTANCE_SCORES
        want_scores = has_prev and (fc is not None or recorder is not None)
        use_reference = fc is not None and fc.score == "reference"
        replaying = fc is not None and has_prev

        cos, sin = self.rope_cos[p], self.rope_sin[p]
        sparse = state.sparse
        windowed = sparse is not None and p + 1 > sparse.sinks + sparse.window
        layer_replay, layer_forced, layer_tas = [], [], []

        x = self._embed(token[:, None], p)[:, 0]
        for li, layer in enumerate(self.layers):
            attn = layer.self_attn
            h_dim, kv_dim, dh = attn.n_heads, attn.n_kv_heads, attn.head_dim
            # Attention over the cache (sinks + window when sparse).
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, h_dim, dh)
            k = attn.k_proj(h).view(b, kv_dim, dh)
            v = attn.v_proj(h).view(b, kv_dim, dh)
            q_rot, k_rot = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            k_cache, v_cache = state.k[li], state.v[li]
            k_cache[:, :, p] = k_rot
            v_cache[:, :, p] = v
            if windowed:
                lo = p + 1 - sparse.window
                keys = torch.cat((k_cache[:, :, : sparse.sinks], k_cache[:, :, lo : p + 1]), dim=2)
                vals = torch.cat((v_cache[:, :, : sparse.sinks], v_cache[:, :, lo : p + 1]), dim=2)
            else:
                keys, vals = k_cache[:, :, : p + 1], v_cache[:, :, : p + 1]
            a = F.scaled_dot_product_attention(q_rot.unsqueeze(2), keys, vals, enable_gqa=kv_dim != h_dim)
            x = x + attn.o_proj(a.reshape(b, h_dim * dh))
            m_in = layer.post_attention_layernorm(x)

            # Temporal attention score against the same position one frame earlier.
            q_score = k_prev = tas = None
            if want_scores:
                k_prev = k_cache[:, :, p - n]
                if kv_dim != h_dim:
                    k_prev = k_prev.repeat_interleave(h_dim // kv_dim, dim=1)
                q_score = q if use_reference else q_rot
                tas = temporal_attention_score(q_score, k_prev)

            # Replay decision.
            replay = None
            if replaying:
                tau = state.taus[li]
                if distance:
                    tas = self._change(li, state, index, m_in)
                    want = tas < tau if fc.strict else tas <= tau
                elif self._replay_rule is None:
                    want = tas > tau if fc.strict else tas >= tau
                else:
                    want = torch.as_tensor(self._replay_rule(li, q_score, k_prev, tau, fc.strict),
                                           device=tas.device)
                    if want.shape != (b,) or want.dtype != torch.bool:
                        raise ValueError(f"replay rule of layer {li} returned {want.dtype} "
                                         f"{tuple(want.shape)}, expected bool ({b},)")
                # The frame-0 rule and the drift guard: one rule, sw.spec.quant.replay_guard.
                chain = None if state.chain is None else state.chain[li, index]
                replay, forced, new_chain = quant.replay_guard(
                    want, frame, chain, refresh_every=fc.refresh_every, max_chain=fc.max_chain)
                layer_forced.append(forced)
                if chain is not None:
                    chain.copy_(new_chain)

            # MLP on the rows that do not replay; replayed rows keep the cached output.
            if fc is None or frame is None:
                y = self._mlp(li, m_in)
                n_keep = b
            else:
                slot = state.replay_cache[li, index]  # [B, d], output used for (t - 1, i)
                keep = None if replay is None else (~replay).nonzero().squeeze(1)
                n_keep = b if keep is None else keep.numel()
                ref = None if state.input_ref is None else state.input_ref[li, index]
                if n_keep == b:
                    y = self._mlp(li, m_in)
                    slot.copy_(y)
                    if ref is not None:
                        ref.copy_(m_in)
                else:
                    if n_keep:
                        kept = m_in.index_select(0, keep)
                        slot.index_copy_(0, keep, self._mlp(li, kept))
                        if ref is not None:
                            ref.index_copy_(0, keep, kept)
                    y = slot
            x = x + y
            state.mlp_calls[li] += int(n_keep > 0)
            state.mlp_rows[li] += n_keep
            state.step_rows[li] += b

            if fc is not None or recorder is not None:
                layer_replay.append(replay)
                layer_tas.append(tas)
            if recorder is not None:
                recorder(StepRecord(
                    layer=li, pos=p, frame=frame, index=index, x=m_in, q=q_score,
                    k_prev=None if k_prev is None else k_prev.clone(), tas=tas,
                    replay=torch.zeros(b, dtype=torch.bool) if replay is None else replay.clone(),
                    mlp_out=y.clone(),
                ))

        state.pos = p + 1
        if frame is not None:
            state._ensure_frame(frame)
            state._filled[frame, index] = True
            if replaying:
                state._replayed[:, frame, index] = torch.stack(layer_replay).cpu()
                state._forced[:, frame, index] = torch.stack(layer_forced).cpu()
            if want_scores:
                state._tas[:, frame, index] = torch.stack(layer_tas).float().cpu()
        return self.lm_head(self.norm(x))


# ---------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------


def _sample(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator,
            ) -> torch.Tensor:
    """Sample one index per row of ``logits`` [B, C] (greedy when ``temperature == 0``)."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = (logits if logits.dtype == torch.float64 else logits.float()) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(logits.device)


@torch.no_grad()
def generate(model: Decoder, prompt_tokens: torch.Tensor, frames: int, *, temperature: float = 1.0,
             top_k: int | None = None, seed: int = 0, cfg_scale: float | None = None,
             uncond_prompt_tokens: torch.Tensor | None = None, fastcar: FastCarConfig | None = None,
             sparse: SparseConfig | None = None, recorder: Recorder | None = None, progress: bool = True,
             image_token_offset: int | None = None, codebook_size: int | None = None,
             sampler=None) -> tuple[torch.Tensor, DecodeStats]:
    """Generate ``frames`` frames of image tokens after a prompt.

    Every sampled token is fed back through :meth:`Decoder.step`, the last one included, so the KV
    cache, the replay statistics and the recorder cover the whole video.

    Parameters
    ----------
    model : Decoder
        The network.
    prompt_tokens : torch.Tensor
        int64 [B, L] prompt (e.g. BOS + words).
    frames : int
        Number of frames ``F``; ``L + F * tokens_per_frame`` must fit in ``max_seq_len``.
    temperature : float
        Softmax temperature; ``0`` is greedy decoding.
    top_k : int or None
        Keep only the ``top_k`` most likely image tokens.
    seed : int
        Seed of the sampling generator (the result is deterministic for a seed).
    cfg_scale : float or None
        Classifier-free guidance scale; ``None`` disables guidance. With guidance the conditional
        and unconditional rows run as one batch of ``2B`` rows, the logits are
        ``uncond + cfg_scale * (cond - uncond)`` and both rows receive the same token.
    uncond_prompt_tokens : torch.Tensor or None
        int64 [B, L] (or [1, L], broadcast) unconditional prompt; required with ``cfg_scale``.
    fastcar : FastCarConfig or None
        Replay settings; ``None`` is dense.
    sparse : SparseConfig or None
        Sparse attention; ``None`` is dense attention.
    recorder : callable or None
        Called with a :class:`~sw.model.fastcar.StepRecord` per (layer, decode step).
    progress : bool
        Show a tqdm bar over frames.
    image_token_offset, codebook_size : int or None
        Range of token ids that frames are sampled from; ``None`` takes the values of
        ``model.config``.
    sampler : callable or None
        ``sampler(cond, uncond)`` -> int [B] indices into the image tokens, called with the image
        slice of the conditional rows' logits and of the unconditional ones (``None`` without
        guidance); it then owns the guidance, temperature and random stream, and ``temperature``,
        ``top_k`` and ``seed`` are not read (``top_k`` is refused). ``None``: softmax sampling
        with ``torch.multinomial``. :mod:`sw.golden.sampling` has the on-chip integer sampler and
        its float twin.

    Returns
    -------
    tokens : torch.Tensor
        int64 [B, F, N] vocabulary ids of the frame tokens (codebook index =
        id - ``image_token_offset``).
    stats : DecodeStats
        Replay decisions [L, F, N, rows] and MLP work; ``rows`` is ``2B`` with guidance
        (conditional rows first).
    """
    cfg = model.config
    offset = cfg.image_token_offset if image_token_offset is None else image_token_offset
    size = cfg.codebook_size if codebook_size is None else codebook_size
    if not (_is_int(offset) and _is_int(size) and offset >= 0 and size >= 1
            and offset + size <= cfg.vocab_size):
        raise ValueError(
            f"image token range [{offset}, {offset}+{size}) does not fit vocab_size={cfg.vocab_size}")
    if prompt_tokens.dim() != 2:
        raise ValueError(f"prompt_tokens must be [B, L], got shape {tuple(prompt_tokens.shape)}")
    if not _is_int(frames) or frames < 1:
        raise ValueError(f"frames must be a positive integer, not {frames!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0, not {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be None or a positive integer, not {top_k!r}")
    if sampler is not None:
        if top_k is not None:
            raise ValueError("top_k is not supported with a sampler (it draws from every image token)")
        own = getattr(sampler, "cfg_scale", cfg_scale)
        if own != cfg_scale:
            raise ValueError(f"the sampler's cfg_scale {own!r} differs from generate's {cfg_scale!r}")
    batch, prompt_len = prompt_tokens.shape
    n = cfg.tokens_per_frame
    total = prompt_len + frames * n
    if total > cfg.max_seq_len:
        raise ValueError(f"prompt of {prompt_len} + {frames} frames x {n} tokens = {total} positions exceeds "
                         f"max_seq_len={cfg.max_seq_len}; raise it with Decoder.set_max_seq_len")
    rows = prompt_tokens
    if cfg_scale is not None:
        if uncond_prompt_tokens is None:
            raise ValueError("cfg_scale needs uncond_prompt_tokens")
        uncond = uncond_prompt_tokens
        if uncond.dim() == 2 and uncond.shape[0] == 1 and batch > 1:
            uncond = uncond.expand(batch, -1)
        if uncond.shape != prompt_tokens.shape:
            raise ValueError(f"uncond_prompt_tokens shape {tuple(uncond_prompt_tokens.shape)} does not match "
                             f"prompt_tokens {tuple(prompt_tokens.shape)}")
        rows = torch.cat([prompt_tokens, uncond], dim=0)
    elif uncond_prompt_tokens is not None:
        raise ValueError("uncond_prompt_tokens given without cfg_scale")

    device = model.embed_tokens.weight.device
    # Every caller (sweeps, reports, golden models) is refused in one line before the KV cache exists.
    from sw import budget

    budget.check(f"frames={frames} ({rows.shape[0]} rows)",
                 budget.decode_memory(cfg, batch=rows.shape[0], frames=frames, prompt_len=prompt_len,
                                      float_bytes=model.embed_tokens.weight.element_size()))
    state = model.new_state(rows.shape[0], capacity=total, fastcar=fastcar, sparse=sparse, recorder=recorder,
                            frames=frames)
    generator = torch.Generator().manual_seed(seed)
    out = torch.empty(batch, frames, n, dtype=torch.int64)
    logits = model.prefill(rows.to(device), state)
    for t in tqdm(range(frames), desc="frames", unit="frame", disable=not progress):
        for i in range(n):
            image_logits = logits[:, offset : offset + size]
            if sampler is not None:
                cond, unc = (image_logits[:batch], image_logits[batch:]) if cfg_scale is not None else (
                    image_logits, None)
                token = torch.as_tensor(np.asarray(sampler(cond.cpu().numpy(), None if unc is None else
                                                           unc.cpu().numpy())), dtype=torch.int64) + offset
                token = token.to(device)
            else:
                if cfg_scale is not None:
                    cond, unc = image_logits[:batch], image_logits[batch:]
                    image_logits = unc + cfg_scale * (cond - unc)
                token = _sample(image_logits, temperature, top_k, generator) + offset
            out[:, t, i] = token.cpu()
            logits = model.step(token.repeat(2) if cfg_scale is not None else token, state)
    return out, state.stats()
