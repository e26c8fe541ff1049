"""FastCar replay and sparse-attention settings, the temporal attention score, and decode statistics.

This module holds the pieces of FastCar that do not depend on the network itself; the decode step
that uses them lives in :mod:`sw.model.decoder`.

Token layout
------------
A decode sequence is ``prompt`` (``frame_start`` positions) followed by frames of
``N = tokens_per_frame`` tokens. Token ``j = (t, i)`` (frame ``t``, in-frame index ``i``) sits at
absolute position ``p = frame_start + t * N + i``; its aligned predecessor ``(t - 1, i)`` sits at
``p - N``.

Temporal attention score (TAS)
------------------------------
For token ``j`` in one layer, with ``h`` query heads of width ``d_head``::

    s_j = (1 / h) * sum_m < q_j^(m), k_{j-N}^(m) > / sqrt(d_head)

``k_{j-N}`` is read from the layer's KV cache, so it is the key *after* RoPE. With
``score="logit"`` (the default) ``q_j`` is also taken after RoPE, so ``s_j`` is exactly the
head-averaged attention logit between the token and its predecessor, in the units that softmax
sees. With ``score="reference"`` ``q_j`` is taken *before* RoPE, as the authors' public code does.

Replay rule
-----------
Per layer, per token and per batch row: the MLP is skipped and its cached output of ``(t - 1, i)``
is used when ``s_j >= tau`` (``strict=False``) or ``s_j > tau`` (``strict=True``). Frame 0 and the
prompt are always computed. The cache holds the output that was *used* (fresh or replayed), so
replay chains as in the reference. The optional drift guard forces computation on every
``refresh_every``-th frame and after ``max_chain`` consecutive replays of one token.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch

SCORES = ("logit", "reference", "input", "oracle")
#: Scores that measure a change (replay where the score is *at most* tau) rather than a similarity.
DISTANCE_SCORES = ("input", "oracle")


#: The default operating point: the TAS threshold of every layer that the shipped model runs at. It is
#: chosen by quality (``python -m sw.evidence.frontier``): the largest replay whose prompt following
#: stays within 5 points of dense on the training prompts, confirmed on the held-out prompts, on the
#: float and the integer path alike (``choose_common``).
DEFAULT_TAU = -4.0


class FastCarConfigError(ValueError):
    """A FastCar or sparse-attention setting that cannot be used."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class FastCarConfig:
    """Settings of FastCar replay in the decode step.

    Parameters
    ----------
    tau : float or sequence of float
        Replay threshold on the TAS, one value for all layers or one per layer. ``+inf`` never
        replays (dense), ``-inf`` replays every token after frame 0.
    strict : bool
        ``False``: replay when ``s >= tau``; ``True``: replay when ``s > tau`` (the reference code).
    score : {"logit", "reference", "input", "oracle"}
        What the replay decision looks at. ``"logit"`` and ``"reference"`` are the TAS (replay
        where ``s >= tau``): the query after RoPE (the real attention logit) or before RoPE (as the
        authors' code); the key is always the cached key after RoPE. The other two measure a
        relative L2 change and replay where it is *at most* tau (``< tau`` when strict):
        ``"input"``, of the MLP's input against the input that produced the cached output;
        ``"oracle"``, of the MLP's fresh output against the cached one (hindsight: it computes
        the MLP to decide, so it saves nothing; it bounds what a rule could reach).
    refresh_every : int or None
        Drift guard: frames ``t`` with ``t % refresh_every == 0`` are computed fully.
    max_chain : int or None
        Drift guard: a token that replayed ``max_chain`` frames in a row (in one layer and row)
        must compute. ``0`` forbids replay altogether.
    """

    tau: float | Sequence[float]
    strict: bool = False
    score: str = "logit"
    refresh_every: int | None = None
    max_chain: int | None = None

    def __post_init__(self):
        taus = self.tau if isinstance(self.tau, Sequence) else [self.tau]
        if isinstance(self.tau, str) or len(taus) == 0:
            raise FastCarConfigError(f"FastCar tau must be a number or a non-empty list, not {self.tau!r}")
        for value in taus:
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
                raise FastCarConfigError(
                    f"FastCar tau values must be real numbers (inf allowed), not {value!r}")
        if isinstance(self.tau, Sequence):
            object.__setattr__(self, "tau", tuple(float(v) for v in self.tau))
        else:
            object.__setattr__(self, "tau", float(self.tau))
        if not isinstance(self.strict, bool):
            raise FastCarConfigError(f"FastCar strict must be a bool, not {self.strict!r}")
        if self.score not in SCORES:
            raise FastCarConfigError(f"FastCar score must be one of {SCORES}, not {self.score!r}")
        if self.refresh_every is not None and (not _is_int(self.refresh_every) or self.refresh_every < 1):
            raise FastCarConfigError(
                f"FastCar refresh_every must be None or an integer >= 1, not {self.refresh_every!r}")
        if self.max_chain is not None and (not _is_int(self.max_chain) or self.max_chain < 0):
            raise FastCarConfigError(
                f"FastCar max_chain must be None or an integer >= 0, not {self.max_chain!r}")

    def layer_taus(self, n_layers: int) -> list[float]:
        """Return the threshold of every layer.

        Parameters
        ----------
        n_layers : int
            Number of decoder layers.

        Returns
        -------
        list of float
            ``n_layers`` thresholds.

        Raises
        ------
        FastCarConfigError
            If a per-layer list has the wrong length.
        """
        if isinstance(self.tau, tuple):
            if len(self.tau) != n_layers:
                raise FastCarConfigError(
                    f"FastCar tau has {len(self.tau)} values but the model has {n_layers} layers")
            return list(self.tau)
        return [self.tau] * n_layers


@dataclass(frozen=True)
class SparseConfig:
    """StreamingLLM-style sparse attention: attention sinks plus a local window.

    A query at position ``p`` attends to key positions ``j <= p`` with ``j < sinks`` or
    ``p - j < window`` (the window includes the query itself).

    Parameters
    ----------
    sinks : int
        Number of leading positions that every query sees (``>= 0``).
    window : int
        Number of most recent positions, including the query itself (``>= 1``).
    """

    sinks: int = 4
    window: int = 16

    def __post_init__(self):
        if not _is_int(self.sinks) or self.sinks < 0:
            raise FastCarConfigError(f"sparse attention sinks must be an integer >= 0, not {self.sinks!r}")
        if not _is_int(self.window) or self.window < 1:
            raise FastCarConfigError(f"sparse attention window must be an integer >= 1, not {self.window!r}")


def attention_mask(query_positions: torch.Tensor, key_length: int, sparse: SparseConfig | None = None,
                   ) -> torch.Tensor:
    """Boolean attention mask (``True`` = may attend) for queries at given absolute positions.

    Parameters
    ----------
    query_positions : torch.Tensor
        int64 [Q], absolute positions of the queries.
    key_length : int
        Number of key positions (``0 .. key_length - 1``).
    sparse : SparseConfig or None
        Sparse pattern; ``None`` gives the plain causal mask.

    Returns
    -------
    torch.Tensor
        bool [Q, key_length].
    """
    p = query_positions.reshape(-1, 1)
    j = torch.arange(key_length, device=p.device).reshape(1, -1)
    mask = j <= p
    if sparse is not None:
        mask &= (j < sparse.sinks) | (p - j < sparse.window)
    return mask


def sparse_attention_mask(seq_len: int, sparse: SparseConfig | None) -> torch.Tensor:
    """Square boolean mask of causal (and optionally sparse) attention over a sequence.

    Parameters
    ----------
    seq_len : int
        Sequence length T.
    sparse : SparseConfig or None
        Sinks and window; ``None`` gives the causal mask.

    Returns
    -------
    torch.Tensor
        bool [T, T], ``mask[p, j]`` is ``True`` when query ``p`` may attend to key ``j``.
    """
    return attention_mask(torch.arange(seq_len), seq_len, sparse)


def temporal_attention_score(q: torch.Tensor, k_prev: torch.Tensor) -> torch.Tensor:
    """Temporal attention score ``(1/h) * sum_m <q^(m), k^(m)> / sqrt(d_head)``.

    Parameters
    ----------
    q : torch.Tensor
        [B, H, dh] queries of the current tokens.
    k_prev : torch.Tensor
        [B, H, dh] keys of the aligned tokens one frame earlier.

    Returns
    -------
    torch.Tensor
        [B] scores.
    """
    return (q * k_prev).sum(-1).mean(-1) / math.sqrt(q.shape[-1])


def mlp_flops_per_row(d_model: int, d_ff: int) -> int:
    """Multiply-add FLOPs (2 per MAC) of one SwiGLU MLP row: three ``d_model x d_ff`` matmuls."""
    return 2 * 3 * d_model * d_ff


@dataclass
class StepRecord:
    """What a recorder receives for one layer in one decode step.

    Attributes
    ----------
    layer : int
        Layer index.
    pos : int
        Absolute position of the token being processed.
    frame : int or None
        Frame index ``t`` (``None`` for prompt positions).
    index : int or None
        In-frame index ``i`` (``None`` for prompt positions).
    x : torch.Tensor
        [B, d] MLP input (after ``post_attention_layernorm``).
    q : torch.Tensor or None
        [B, H, dh] query used for the TAS (after RoPE for ``score="logit"``, before for
        ``"reference"``); ``None`` in frame 0 and the prompt.
    k_prev : torch.Tensor or None
        [B, H, dh] cached key (after RoPE) at ``pos - N``, expanded to the query heads;
        ``None`` in frame 0 and the prompt.
    tas : torch.Tensor or None
        [B] temporal attention scores (the relative change for the distance scores);
        ``None`` in frame 0 and the prompt.
    replay : torch.Tensor
        [B] bool, ``True`` where the MLP was skipped and the cached output was used.
    mlp_out : torch.Tensor
        [B, d] MLP output that was used (fresh or replayed), before the residual add.
    """

    layer: int
    pos: int
    frame: int | None
    index: int | None
    x: torch.Tensor
    q: torch.Tensor | None
    k_prev: torch.Tensor | None
    tas: torch.Tensor | None
    replay: torch.Tensor
    mlp_out: torch.Tensor


@dataclass
class DecodeStats:
    """Replay decisions and MLP work of one decode run.

    Attributes
    ----------
    replayed : torch.Tensor
        bool [L, F, N, B]: layer, frame, in-frame index, batch row (with classifier-free guidance
        the batch holds the conditional rows, then the unconditional ones). ``True`` where the MLP
        was skipped.
    forced : torch.Tensor
        bool [L, F, N, B]: the score asked for replay but the drift guard forced computation.
    tas : torch.Tensor
        float32 [L, F, N, B] temporal attention scores, or the relative change of a distance
        score (NaN in frame 0, where none is computed, and when FastCar is off and no recorder
        asked for scores).
    filled : torch.Tensor
        bool [F, N]: positions that went through a decode step.
    mlp_calls : list of int
        Per layer: MLP invocations in decode steps (a step whose rows all replay makes none).
    mlp_rows : list of int
        Per layer: rows that went through the MLP in decode steps.
    step_rows : list of int
        Per layer: rows processed by decode steps (computed plus replayed).
    d_model, d_ff : int
        Sizes used for FLOP counts.
    """

    replayed: torch.Tensor
    forced: torch.Tensor
    tas: torch.Tensor
    filled: torch.Tensor
    mlp_calls: list[int]
    mlp_rows: list[int]
    step_rows: list[int]
    d_model: int
    d_ff: int

    def replay_ratio(self) -> float:
        """Fraction of (layer, frame token, row) MLP evaluations that replayed, frame 0 included.

        Returns
        -------
        float
            In ``[0, 1]``; at most ``(F - 1) / F`` because frame 0 always computes.
        """
        n = int(self.filled.sum()) * self.replayed.shape[0] * self.replayed.shape[3]
        return float(self.replayed.sum()) / n if n else 0.0

    def replay_ratio_per_layer(self) -> torch.Tensor:
        """float64 [L] replay ratio of each layer over filled frame tokens and rows."""
        n = int(self.filled.sum()) * self.replayed.shape[3]
        return self.replayed.sum(dim=(1, 2, 3)).double() / max(n, 1)

    def replay_ratio_per_frame(self) -> torch.Tensor:
        """float64 [F] replay ratio of each frame over layers, filled tokens and rows."""
        n = self.filled.sum(1).double() * self.replayed.shape[0] * self.replayed.shape[3]
        return self.replayed.sum(dim=(0, 2, 3)).double() / n.clamp(min=1)

    def mlp_flops(self) -> tuple[int, int]:
        """MLP FLOPs of the decode steps: ``(computed, dense)``, where dense computes every row."""
        per_row = mlp_flops_per_row(self.d_model, self.d_ff)
        return sum(self.mlp_rows) * per_row, sum(self.step_rows) * per_row
