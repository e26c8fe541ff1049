"""The decode step as built in RTL (:class:`hw.step.decode_step.DecodeStep`): its SDRAM bytes per step,
exactly, and its cycles per step, from a linear model whose coefficients are fitted on RTL runs.

Bytes (:class:`hw.step.step_memory.StepMemory`): each row's int32 embedding (``d * 4`` bytes) and,
on an image step, its int32 spatial row; for each layer, row and head, the attended earlier
positions' keys and values read and the new one written, ``kv_entry_words * data_width / 8`` bytes
each. The weights (:class:`hw.step.weight_stream.WeightStream`, :func:`weight_bytes`): every layer's
image each step, and on a step that samples the final norm and the LM head once per prompt.

Cycles: ``c_step + c_sample * samples + c_position * positions + c_row * computed_rows +
c_group * computing_groups + c_start * video_start``, where ``positions`` is the attended positions
summed over layers, rows and heads (the current one included), ``computed_rows`` the MLP rows not
replayed, ``computing_groups`` the layers in which at least one row computes and ``video_start`` is
1 on the video's first step only: that step starts with nothing prefetched (every later step's
first weights and keys were fetched during the step before), so it waits for its first
reads. :func:`fit` takes the
coefficients from measured steps (least squares); ``tb/step/calibrate.py`` fits them on some modes
and checks them on the others.
"""

from __future__ import annotations

import numpy as np

from sw.spec import quant

FEATURES = ("step", "sample", "position", "computed_row", "computing_group", "video_start")

#: The coefficients of :data:`FEATURES` fitted on RTL runs: ``command`` (the first 85 steps of dense
#: and FastCar, ``build/step/calibration/report.json``) with the memory at ``sdram_bytes_per_cycle``
#: (a 64-bit beat every 3 cycles) and the weights read over AXI4; :func:`sw.perf.system_model.rtl_as_built`
#: uses them. ``step`` and ``sample`` are mostly the weights' reads (each layer's every step, the LM
#: head's on a step that samples), under which the rest of the step's compute runs; ``position`` is a
#: key and value's 6 beats; ``video_start`` the first step's wait for its first reads (step 0
#: measures 66,177 cycles in all four modes, here and in ``nox -s step -- --e2e``).
CALIBRATED = {"command": "nox -s step -- --calibrate", "sdram_bytes_per_cycle": 2.8,
              "coefficients": (57474.41, 39972.70, 18.07, 165.99, 315.87, 3627.86)}


def attended(p: int, sinks: int, window: int) -> int:
    """Earlier positions a step at position ``p`` attends (``window`` 0: all of them), as
    :func:`sw.model.fastcar.attention_mask` without the current one."""
    if not window:
        return p
    j = np.arange(p)
    return int(((j < sinks) | (p - j < window)).sum())


def entry_bytes(head_dim: int, data_width: int = 64) -> int:
    """Bytes of one head's key and value of one position in memory: ``2 * head_dim`` int8 in whole
    data words (:func:`hw.step.step_memory.kv_entry_words` words, checked against every burst by
    ``nox -s step -- --calibrate``)."""
    return -(-2 * head_dim * 8 // data_width) * data_width // 8


def channel_bytes(d_model: int, data_width: int = 64) -> int:
    """A norm's constants in memory: each channel's ``mult`` and ``shift`` in 32 bits
    (:func:`hw.step.weight_stream.channel_words`)."""
    return d_model // (data_width // 32) * data_width // 8


def block_bytes(d_in: int, mv: tuple[int, int], data_width: int = 64) -> int:
    """A weight block of ``mv[1]`` outputs in memory: their constants (``mult`` and ``shift``) in whole
    words, then ``d_in / mv[0]`` beats of ``mv[0] * mv[1]`` int8 weights, each in whole words
    (:func:`hw.step.weight_stream.block_words`)."""
    ni, no = mv
    const = -(-no * (quant.MULT_BITS + quant.SHIFT_BITS) // data_width)
    return (const + d_in // ni * -(-ni * no * 8 // data_width)) * data_width // 8


def weight_bytes(dims: dict, mv: tuple[int, int], data_width: int = 64, *, sample: bool) -> int:
    """The weights a step reads: each layer's image (two norms' constants, the q, k, v and o
    projections' blocks) and, on a step that samples, the final norm's constants and the LM head's
    blocks over the image tokens once per prompt."""
    d, L, PR, C = (dims[k] for k in ("d_model", "layers", "prompts", "codebook"))
    layer = 2 * channel_bytes(d, data_width) + 4 * d // mv[1] * block_bytes(d, mv, data_width)
    head = channel_bytes(d, data_width) + PR * C // mv[1] * block_bytes(d, mv, data_width)
    return L * layer + (head if sample else 0)


def sdram_beat_every(bytes_per_cycle: float, beat_bytes: int = 8) -> int:
    """Cycles from one data beat of the memory to the next at ``bytes_per_cycle`` (0: every cycle),
    as the decode step's bench paces cocotbext-axi's ``AxiRam`` on its R and W channels."""
    return max(1, round(beat_bytes / bytes_per_cycle)) if bytes_per_cycle else 1


def _sparse(manifest) -> tuple[int, int]:
    sp = manifest["decode"]["sparse"]
    return (sp["sinks"], sp["window"]) if sp else (0, 0)


def step_bytes(manifest, steps, data_width: int = 64, mv: tuple[int, int] = (8, 8)) -> np.ndarray:
    """``[len(steps), 3]``: the bytes read and written by each step, and the weights' among those read
    (``mv``: the MAC array's weight block, ``mv_in x mv_out``)."""
    dims = manifest["dims"]
    d, L, B, H, dh, NS = (dims[k] for k in ("d_model", "layers", "batch", "n_heads", "head_dim", "samples"))
    entry = entry_bytes(dh, data_width)
    sinks, window = _sparse(manifest)
    start = manifest["prompt_len"]
    out = []
    for s in steps:
        emb = B * d * 4 * (2 if s >= start else 1)
        w = weight_bytes(dims, mv, data_width, sample=start - 1 <= s < start - 1 + NS)
        out.append((emb + L * B * H * attended(s, sinks, window) * entry + w, L * B * H * entry, w))
    return np.asarray(out, np.int64)


def features(manifest, replay: np.ndarray, steps) -> np.ndarray:
    """``[len(steps), len(FEATURES)]`` of a full-step trace's steps (``replay``: its ``[S, L, B]``)."""
    dims = manifest["dims"]
    L, B, H, NS = (dims[k] for k in ("layers", "batch", "n_heads", "samples"))
    sinks, window = _sparse(manifest)
    first = manifest["prompt_len"] - 1
    rows = []
    for s in steps:
        computed = (1 - replay[s].astype(np.int64)).sum(1)            # per layer
        rows.append((1, int(first <= s < first + NS), L * B * H * (attended(s, sinks, window) + 1),
                     int(computed.sum()), int((computed > 0).sum()), int(s == 0)))
    return np.asarray(rows, np.float64)


def fit(x: np.ndarray, cycles: np.ndarray) -> np.ndarray:
    """Least-squares coefficients of :data:`FEATURES` (a feature constant over every step given is
    folded into ``step``)."""
    coef, *_ = np.linalg.lstsq(x, np.asarray(cycles, np.float64), rcond=None)
    return coef


def predict(x: np.ndarray, coef) -> np.ndarray:
    return x @ np.asarray(coef, np.float64)
