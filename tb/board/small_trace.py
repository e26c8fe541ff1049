"""A small decode trace for a small accelerator, made from random weights by the golden model.

The board testbench needs a trace whose sizes fit an accelerator small enough to simulate with
its UART in seconds; the shipped trace is for the default geometry. :func:`write_small_trace`
writes one in the standard format (``golden/README.md``): random int8 weights and integer
constants per layer, random rows, and for frames after the first a ``k_prev`` that either equals
``q`` (the score clears the threshold: replay) or is its negation (compute), so both decisions and
replay chains occur. The outputs follow the trace rules exactly (``sw.trace.decode.check_decode_trace``
recomputes them): a computed row is ``sw.spec.quant.swiglu_int8`` of its input, a replayed row is the
output used one frame earlier at the same layer, position and row.
"""

from pathlib import Path

import numpy as np

from sw.config import AccelConfig
from sw.spec import quant
from sw.trace.decode import write_decode_trace

__all__ = ["SMALL_ACCEL", "write_small_trace"]

#: Two layers of d = 8, d_ff = 16 on 2x2 arrays, two cores, two rows per group, two positions.
SMALL_ACCEL = AccelConfig(d_model=8, d_ff=16, layers=2, tokens_per_frame=2, batch=2, cores=2, chunks=2,
                          tas_lanes=4, mv_in=2, mv_out=2)


def _layer(rng, d, f):
    """Random weights and constants that keep the outputs spread over the int8 range."""
    return {"wg": rng.integers(-128, 128, (d, f)).astype(np.int8),
            "wu": rng.integers(-128, 128, (d, f)).astype(np.int8),
            "wd": rng.integers(-128, 128, (f, d)).astype(np.int8),
            "mult_g": rng.integers(20000, 60000, f).astype(np.uint16),
            "shift_g": rng.integers(23, 25, f).astype(np.uint8),
            "mult_u": rng.integers(20000, 60000, f).astype(np.uint16),
            "shift_u": rng.integers(23, 25, f).astype(np.uint8),
            "lut": quant.silu_lut(rng.uniform(0.03, 0.06), 0.04),
            "mult_h": np.uint16(rng.integers(40000, 60000)), "shift_h": np.uint8(21),
            "mult_d": rng.integers(20000, 60000, d).astype(np.uint16),
            "shift_d": rng.integers(22, 24, d).astype(np.uint8)}


def write_small_trace(out, cfg: AccelConfig = SMALL_ACCEL, *, frames: int = 3, heads: int = 2,
                      seed: int = 1, p_replay: float = 0.5) -> Path:
    """Write a decode trace of ``frames`` frames for ``cfg`` into ``out`` (overwritten) and return
    its path. The default seed gives groups where both rows compute, both replay, and one of each."""
    rng = np.random.default_rng(seed)
    L, N, B, d, f = cfg.layers, cfg.tokens_per_frame, cfg.batch, cfg.d_model, cfg.d_ff
    if d % heads:
        raise ValueError(f"d_model {d} is not a multiple of heads={heads}")
    dh = d // heads
    layers = [_layer(rng, d, f) for _ in range(L)]
    G = frames * N * L
    t = {
        "group_layer": np.zeros(G, np.int16), "group_frame": np.zeros(G, np.int16),
        "group_index": np.zeros(G, np.int16),
        "x": rng.integers(-128, 128, (G, B, d)).astype(np.int8),
        "q": rng.integers(-12, 13, (G, B, heads, dh)).astype(np.int8),
        "k_prev": np.zeros((G, B, heads, dh), np.int8), "tas": np.zeros((G, B), np.int64),
        "replay": np.zeros((G, B), np.uint8), "y": np.zeros((G, B, d), np.int8),
    }
    threshold = 1
    used = {}
    g = 0
    for frame in range(frames):
        for index in range(N):
            for layer in range(L):
                t["group_layer"][g], t["group_frame"][g], t["group_index"][g] = layer, frame, index
                p = layers[layer]
                y = quant.swiglu_int8(t["x"][g], p["wg"], p["wu"], p["wd"], p)
                if frame > 0:
                    sign = np.where(rng.random(B) < p_replay, 1, -1).astype(np.int8)
                    t["k_prev"][g] = t["q"][g] * sign[:, None, None]
                    t["tas"][g] = quant.tas_int(t["q"][g], t["k_prev"][g])
                    replay = quant.replay_decision(t["tas"][g], threshold)
                    t["replay"][g] = replay
                    y[replay] = used[(layer, index)][replay]
                t["y"][g] = y
                used[(layer, index)] = y
                g += 1
    for name in ("wg", "wu", "wd", "mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h",
                 "shift_h", "mult_d", "shift_d"):
        t[name] = np.stack([np.asarray(p[name]) for p in layers])
    t["threshold"] = np.full(L, threshold, np.int64)
    manifest = {
        "source": f"tb.board.small_trace.write_small_trace(seed={seed}, frames={frames})",
        "dims": {"layers": L, "groups": G, "batch": B, "d_model": d, "d_ff": f, "n_heads": heads,
                 "head_dim": dh},
        "layers": L, "frames": frames, "tokens_per_frame": N,
        "decode": {"refresh_every": None, "max_chain": None, "strict": False},
        "replay_ratio": float(t["replay"].mean()),
    }
    return write_decode_trace(Path(out), manifest, t, force=True)
