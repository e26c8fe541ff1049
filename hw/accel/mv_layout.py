"""Where the datapath finds things: the order of the weight blocks in the weight store, and the
addresses of the per-channel requantisation tables. One definition, used by the gateware
(:class:`hw.accel.mv_core.MvCore`), the host packer and the tests.

A core runs two kinds of pass per hidden chunk ``c`` of layer ``l`` (``F = d_ff / chunks``):

* **GU pass** (gate and up): for each output block ``ob`` of ``mv_out`` hidden channels
  (``F / mv_out`` of them), the gate run then the up run, each ``d_model / mv_in`` cycles (input
  blocks ``ib``); a run's sums are ``x @ w[:, c*F + ob*mv_out : ... + mv_out]``.
* **D pass** (down): for each output block ``ob`` of ``mv_out`` model channels
  (``d_model / mv_out``), one run of ``F / mv_in`` cycles over the chunk's ``h``.

One cycle reads one ``mv_out x mv_in`` weight block. The blocks of a chunk are stored in the order
its passes read them, GU pass then D pass, so each pass reads consecutive addresses from
:func:`chunk_base`.
"""

from __future__ import annotations

import numpy as np

from sw.config import AccelConfig

__all__ = ["chunk_base", "pass_lengths", "weight_blocks", "gu_channel", "gu_table_index"]


def pass_lengths(cfg: AccelConfig) -> dict:
    """Loop bounds of the two passes: input blocks per run (``ib``), output blocks (``ob``)."""
    f = cfg.chunk_width
    return {"gu_ib": cfg.d_model // cfg.mv_in, "gu_ob": f // cfg.mv_out,
            "d_ib": f // cfg.mv_in, "d_ob": cfg.d_model // cfg.mv_out}


def chunk_base(cfg: AccelConfig, layer: int, chunk: int) -> int:
    """Address of the first weight block of ``(layer, chunk)``; its D pass starts
    ``mv_blocks_per_chunk[0]`` blocks later."""
    return (layer * cfg.chunks + chunk) * sum(cfg.mv_blocks_per_chunk)


def weight_blocks(cfg: AccelConfig, layers: list[dict]) -> np.ndarray:
    """Every weight block in store order: int8 ``[mv_weight_blocks, mv_out, mv_in]``, block
    ``[n, k]`` = weight of output ``n`` from input ``k``.

    ``layers[l]`` holds ``wg``, ``wu`` (``[d_model, d_ff]``) and ``wd`` (``[d_ff, d_model]``).
    """
    if len(layers) != cfg.layers:
        raise ValueError(f"{len(layers)} layers of weights for an accelerator built for {cfg.layers}")
    d, ff, f = cfg.d_model, cfg.d_ff, cfg.chunk_width
    I, O = cfg.mv_in, cfg.mv_out
    L = pass_lengths(cfg)
    out = np.zeros((cfg.mv_weight_blocks, O, I), dtype=np.int8)
    for n, lay in enumerate(layers):
        wg, wu, wd = (np.asarray(lay[k]) for k in ("wg", "wu", "wd"))
        for name, w, shape in (("wg", wg, (d, ff)), ("wu", wu, (d, ff)), ("wd", wd, (ff, d))):
            if w.shape != shape:
                raise ValueError(f"layer {n}: {name} has shape {w.shape}, expected {shape}")
        for c in range(cfg.chunks):
            a = chunk_base(cfg, n, c)
            for ob in range(L["gu_ob"]):
                cols = slice(c * f + ob * O, c * f + (ob + 1) * O)
                for w in (wg, wu):
                    for ib in range(L["gu_ib"]):
                        out[a] = w[ib * I:(ib + 1) * I, cols].T
                        a += 1
            for ob in range(L["d_ob"]):
                for ib in range(L["d_ib"]):
                    out[a] = wd[c * f + ib * I:c * f + (ib + 1) * I, ob * O:(ob + 1) * O].T
                    a += 1
    return out


def gu_channel(cfg: AccelConfig, chunk: int, ob: int, n: int) -> int:
    """The hidden channel of output ``n`` of GU output block ``ob`` of ``chunk``."""
    return chunk * cfg.chunk_width + ob * cfg.mv_out + n


def gu_table_index(cfg: AccelConfig, up: int, layer: int, channel: int) -> int:
    """Entry of the gate (``up = 0``) or up (``up = 1``) requantisation table of ``channel``."""
    return (up * cfg.layers + layer) * cfg.d_ff + channel
