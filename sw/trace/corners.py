"""The directed corner-case decode trace: every tie, saturation and replay boundary of the spec.

``python sw/export_trace.py --corners`` writes it (``golden/corners/`` is the committed copy). It
is built from constructed integers, not from the model: weights, constants, tables, MLP inputs
and the q / k pairs whose TAS lands exactly where the rules turn. Its expected outputs come from
the one spec (:mod:`sw.spec.quant`) like every other trace, so the RTL is checked on it exactly as on
a model trace (``nox -s sim -- --trace golden/corners``).

What it holds (the manifest's ``corners`` field lists every group's classes and their counts):

- exact rounding ties in every requantisation stage (gate, up, the gating product ``h``, down),
  for both parities of the floored quotient and on both sides of zero, and ties next to the
  saturation bounds (126.5, 127.5, -127.5, -128.5);
- saturation at 127 and -128 (values beyond the bound) and outputs exactly at the bounds;
- ``TAS == T``, ``T - 1`` and ``T + 1`` on frames > 0 where the guard does not force, and
  ``TAS >= T`` on frame 0 (which computes);
- the drift guard at its boundaries (``refresh_every = 6``, ``max_chain = 2``): chains exactly
  ``max_chain`` long and then forced, a refresh frame whose rows would otherwise replay with a
  chain shorter than ``max_chain``;
- weights of -128, and per-channel ``mult`` of 0, 1 and 65535 and ``shift`` of 0, 1, 47, 48 and 63;
- the datapath's extremes (layer 3, whose weights are all -128): rows whose inputs are all -128, so
  that every product of the gate/up sums is (-128)(-128) and every adder-tree stage and accumulator
  of the GU pass reaches its largest value (``d_model`` x 2**14); their ``h`` is -128 on every
  hidden channel, so the down sums reach ``d_ff`` x 2**14 = 2**22, the largest value the cores' row
  accumulators and the output stage's sum must hold; and ``q = k = -128``, the largest TAS;
- a layer with tau = +inf (threshold ``2**31``, never replays) and one with tau = -inf
  (``-2**31``, replays whenever the guard allows).

Geometry: the default accelerator's (``sw.config.DEFAULT_ACCEL``: 4 layers, d 96, d_ff 256,
4 heads x 24, batch 4), 8 frames of 4 positions: 128 groups. ``--small`` builds the same trace for
``sw.config.SMALL_ACCEL`` (d 16, d_ff 48, 3 chunks; ``golden/corners-small``), the second geometry
the RTL is checked on; its few hidden channels do not reach every class (the manifest counts
them, and only the default geometry must have all).
"""

from __future__ import annotations

import numpy as np

from sw.spec import quant

SEED = 6
FRAMES = 8
POSITIONS = 4
REFRESH_EVERY = 6
MAX_CHAIN = 2
#: Per-layer thresholds: two finite ones (positive and negative), tau = +inf and tau = -inf.
THRESHOLDS = (1000, -777, quant.THRESHOLD_NEVER, quant.ACC_MIN)
STAGES = ("gate", "up", "h", "down")
#: Prefixes of the requantisation classes (the others are replay-decision classes).
REQUANT_CLASSES = ("tie", "saturate/", "at-bound/", "weight=")
#: (mult, shift) at the first channels of gate, up and down: the spec's extremes.
EXTREME_CONSTANTS = ((0, 0), (0, 1), (1, 0), (1, 1), (65535, 0), (65535, 47), (65535, 48), (65535, 63),
                     (1, 63), (40000, 47), (1, 48))
#: (mult, shift) of the other channels: small scales, so that ties occur often (1 in 2**shift).
TIE_CONSTANTS = ((1, 6), (3, 8), (5, 9), (1, 5), (7, 9), (1, 7), (9, 10), (1, 4))
#: (mult_h, shift_h) per layer.
H_CONSTANTS = ((1, 6), (3, 8), (1, 1), (1, 0))

#: Every class the trace must hold at least once, with what it means.
CLASSES = {
    **{f"tie/{s}/{par}/{sign}": f"{s}: an exact tie (r == 2**(shift-1)), floored quotient {par}, p {sign}"
       for s in STAGES for par in ("even", "odd") for sign in ("neg", "pos")},
    **{f"tie-next-to-bound/{s}/{side}": f"{s}: a tie at {v}" for s in STAGES
       for side, v in (("hi", "126.5 or 127.5"), ("lo", "-127.5 or -128.5"))},
    **{f"saturate/{s}/{side}": f"{s}: rounded value {v}, clamped" for s in STAGES
       for side, v in (("hi", "> 127"), ("lo", "< -128"))},
    **{f"at-bound/{s}/{side}": f"{s}: rounded value exactly {v}" for s in STAGES
       for side, v in (("hi", "127"), ("lo", "-128"))},
    "tas==T": "frame > 0, TAS equal to the threshold, not forced: replays (>=, not >)",
    "tas==T-1": "frame > 0, TAS one below the threshold: computes",
    "tas==T+1": "frame > 0, TAS one above the threshold, not forced: replays",
    "frame0/tas>=T": "frame 0 with TAS >= T: computes (frame 0 never replays)",
    "chain==max_chain": "a row that replayed exactly max_chain frames in a row and would replay again: "
                        "forced to compute",
    "chain==max_chain-1": "a row with a chain one shorter than max_chain and TAS >= T: replays",
    "refresh/would-replay": "a refresh frame (frame % refresh_every == 0), TAS >= T and a chain "
                            "shorter than max_chain: forced to compute",
    "refresh/next-frame-replays": "a frame next to a refresh frame (frame % refresh_every == 1 or "
                                  "refresh_every - 1) in which a row replays",
    "tau=+inf": "a row of a layer whose threshold is 2**31 (never replays)",
    "tau=-inf": "a frame > 0 row of a layer whose threshold is -2**31",
    "weight=-128": "a computed row whose layer has weights of -128",
    "extreme/gu-products": "a computed row whose gate and up sums are d_model products (-128)(-128): "
                           "every GU adder-tree stage and accumulator at its largest value",
    "extreme/down-products": "a computed row whose down sums are d_ff products (-128)(-128) (2**22): "
                             "every D adder-tree stage, the cores' row accumulators and the output "
                             "stage's sum at their largest value",
    "extreme/tas": "a row with q = k = -128: the TAS at its largest value",
}
#: The layer whose weights are all -128 and whose extreme rows have inputs of -128 (tau = -inf: its
#: rows compute in frame 0 and when the drift guard forces them, and replay otherwise).
EXTREME_LAYER = 3
#: Positions of the extreme layer whose rows 0 and 1 are extreme (inputs, q and k all -128).
EXTREME_POSITIONS = (2, 3)


def _stage_classes(p, shift) -> dict[str, np.ndarray]:
    """Masks of the classes of one requantisation stage, over ``p = acc * mult`` and ``shift``
    broadcast to the same shape (the same arithmetic as :func:`sw.spec.quant.round_shift_rne`)."""
    p, shift, q, r, half = quant.shift_parts(p, shift)
    tie = (shift > 0) & (r == half)
    y = quant.round_shift_rne(p, shift)
    out = {}
    for par, bit in (("even", 0), ("odd", 1)):
        for sign, m in (("neg", p < 0), ("pos", p > 0)):
            out[f"{par}/{sign}"] = tie & ((q & 1) == bit) & m
    out["next-hi"] = tie & ((q == 126) | (q == 127))
    out["next-lo"] = tie & ((q == -128) | (q == -129))
    out["sat-hi"], out["sat-lo"] = y > 127, y < -128
    out["bound-hi"], out["bound-lo"] = y == 127, y == -128
    return out


def mlp_classes(x, wg, wu, wd, c) -> list[set[str]]:
    """The requantisation classes each row of ``x`` [R, d] exercises in the SwiGLU MLP of one layer
    (the stages of :func:`sw.spec.quant.swiglu_int8`)."""
    acc_g, acc_u = quant.matmul_int(x, wg), quant.matmul_int(x, wu)
    gate = quant.requantize(acc_g, c["mult_g"], c["shift_g"])
    up = quant.requantize(acc_u, c["mult_u"], c["shift_u"])
    act = quant.apply_lut(gate, c["lut"])
    p_h = act.astype(np.int64) * up.astype(np.int64)
    h = quant.requantize(p_h, c["mult_h"], c["shift_h"])
    acc_d = quant.matmul_int(h, wd)
    stages = {
        "gate": (acc_g * c["mult_g"].astype(np.int64), c["shift_g"]),
        "up": (acc_u * c["mult_u"].astype(np.int64), c["shift_u"]),
        "h": (p_h * np.int64(c["mult_h"]), c["shift_h"]),
        "down": (acc_d * c["mult_d"].astype(np.int64), c["shift_d"]),
    }
    rows = [set() for _ in range(x.shape[0])]
    for s, (p, sh) in stages.items():
        for key, mask in _stage_classes(p, sh).items():
            kind, _, rest = key.partition("-")
            name = {"next": f"tie-next-to-bound/{s}/{rest}", "sat": f"saturate/{s}/{rest}",
                    "bound": f"at-bound/{s}/{rest}"}.get(kind, f"tie/{s}/{key}")
            for b in np.flatnonzero(mask.any(axis=-1)):
                rows[b].add(name)
    return rows


def extreme_classes(x, c) -> set[str]:
    """The ``extreme/`` classes of the computed rows ``x`` [R, d] in a layer with constants ``c``:
    sums of products that are all (-128)(-128), over the whole length (``d_model`` for gate and up,
    ``d_ff`` for down)."""
    out = set()
    x = np.asarray(x, np.int64)
    for name in ("wg", "wu"):
        w = np.asarray(c[name], np.int64)
        full = ((x[:, :, None] == -128) & (w[None] == -128)).all(axis=1)      # [R, d_ff]
        if full.any():
            out.add("extreme/gu-products")
    gate = quant.requantize(quant.matmul_int(x, c["wg"]), c["mult_g"], c["shift_g"])
    up = quant.requantize(quant.matmul_int(x, c["wu"]), c["mult_u"], c["shift_u"])
    act = quant.apply_lut(gate, c["lut"])
    h = quant.requantize(act.astype(np.int64) * up.astype(np.int64), c["mult_h"], c["shift_h"])
    wd = np.asarray(c["wd"], np.int64)
    if ((h[:, :, None] == -128) & (wd[None] == -128)).all(axis=1).any():
        out.add("extreme/down-products")
    return out


def _constants(rng, layer: int, d: int, f: int) -> dict:
    """Weights and integer constants of one layer."""
    def sparse(k, n, nnz):
        w = np.zeros((k, n), np.int64)
        for col in range(n):
            idx = rng.choice(k, size=nnz, replace=False)
            w[idx, col] = rng.integers(-128, 128, size=nnz)
        w[rng.integers(k), rng.integers(n)] = -128      # -128 is accepted by the integer path
        return w.astype(np.int8)

    def per_channel(n):
        # The extreme layer: small scales on every channel, so that its extreme rows saturate
        # gate and up at 127 on every channel (and h at -128).
        mult, shift = np.zeros(n, np.uint16), np.zeros(n, np.uint8)
        for ch in range(n):
            m, s = (EXTREME_CONSTANTS[ch] if ch < len(EXTREME_CONSTANTS) and layer != EXTREME_LAYER
                    else TIE_CONSTANTS[(ch + layer) % len(TIE_CONSTANTS)])
            mult[ch], shift[ch] = m, s
        return mult, shift

    codes = np.arange(-128, 128)
    if layer == 0:
        lut = codes                                   # identity: a gate change reaches h
    elif layer == 1:
        lut = quant.silu_lut(6.0 / 127, 5.0 / 127)    # a SiLU table that saturates at 127
    elif layer == 2:
        lut = np.clip(-codes, -128, 127)              # -(-128) saturates
    else:
        lut = rng.permutation(codes)                  # every int8 value once
        # ... with lut[127] = -128, so that the extreme rows (gate saturated at 127) get h = -128.
        at = int(np.flatnonzero(lut == -128)[0])
        lut[at], lut[255] = lut[255], -128
    if layer == EXTREME_LAYER:
        c = {name: np.full(shape, -128, np.int8) for name, shape in (("wg", (d, f)), ("wu", (d, f)),
                                                                     ("wd", (f, d)))}
    else:
        c = {"wg": sparse(d, f, 3), "wu": sparse(d, f, 3), "wd": sparse(f, d, 3)}
    c["mult_g"], c["shift_g"] = per_channel(f)
    c["mult_u"], c["shift_u"] = per_channel(f)
    c["mult_d"], c["shift_d"] = per_channel(d)
    c["lut"] = np.asarray(lut).astype(np.int8)
    c["mult_h"], c["shift_h"] = np.uint16(H_CONSTANTS[layer][0]), np.uint8(H_CONSTANTS[layer][1])
    return c


def _qk_with_score(rng, target: int, heads: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 ``q``, ``k`` [heads, head_dim] with ``sum(q * k) == target`` exactly."""
    n = heads * head_dim
    while True:
        q = rng.integers(-128, 128, size=n)
        k = rng.integers(-40, 41, size=n)
        q[-1] = 1
        need = target - int(q @ k)
        for e in range(n - 1):
            if q[e] == 0 or need == 0:
                continue
            step = int(np.clip(need // int(q[e]), -128 - k[e], 127 - k[e]))
            k[e] += step
            need -= step * int(q[e])
        k[-1] += need
        if -128 <= k[-1] <= 127:
            assert int(q @ k) == target
            return q.reshape(heads, head_dim).astype(np.int8), k.reshape(heads, head_dim).astype(np.int8)


#: Offsets from the threshold per frame 0..7 for the rows of positions 0 and 1 of the finite
#: layers; None: a random score near the threshold. Position 0: the comparison at T, T - 1, T + 1
#: (rows 0-2), alternating (row 3). Position 1: a refresh frame that would replay with a short
#: chain (row 0), a chain exactly max_chain long (row 1), a chain of max_chain - 1 (row 2).
PATTERNS = {
    (0, 0): [5, 0, 0, 0, 0, 0, 0, 0],
    (0, 1): [-1] * 8,
    (0, 2): [1] * 8,
    (0, 3): [0, 0, -1, 0, -1, 0, -1, 0],
    (1, 0): [5, -1, 0, -1, -1, -1, 0, 0],
    (1, 1): [0, 0, 0, 0, -1, 0, 0, 0],
    (1, 2): [0, 0, -1, 0, 0, 0, -1, 1],
}


def build(*, seed: int = SEED, cfg=None) -> tuple[dict, dict]:
    """The corner trace's manifest fields and tensors (``sw.trace.decode.write_decode_trace`` input)
    for the accelerator ``cfg`` (default ``sw.config.DEFAULT_ACCEL``, which must hold every class)."""
    from sw.config import DEFAULT_ACCEL

    cfg = cfg or DEFAULT_ACCEL
    L, d, f, B = cfg.layers, cfg.d_model, cfg.d_ff, cfg.batch
    H = 4
    dh = d // H
    if L != len(THRESHOLDS):
        raise ValueError(f"the corner trace is built for {len(THRESHOLDS)} layers, the accelerator has {L}")
    rng = np.random.default_rng(seed)
    consts = [_constants(rng, li, d, f) for li in range(L)]
    N, F = POSITIONS, FRAMES
    order = [(fr, ix, li) for fr in range(F) for ix in range(N) for li in range(L)]
    G = len(order)
    t = {"group_layer": np.array([o[2] for o in order], np.int16),
         "group_frame": np.array([o[0] for o in order], np.int16),
         "group_index": np.array([o[1] for o in order], np.int16),
         "x": np.zeros((G, B, d), np.int8), "q": np.zeros((G, B, H, dh), np.int8),
         "k_prev": np.zeros((G, B, H, dh), np.int8), "tas": np.zeros((G, B), np.int64),
         "replay": np.zeros((G, B), np.uint8), "y": np.zeros((G, B, d), np.int8)}
    classes = [set() for _ in range(G)]
    chains, cache = {}, {}
    for g, (fr, ix, li) in enumerate(order):
        T = THRESHOLDS[li]
        for b in range(B):
            if li < 2:
                pat = PATTERNS.get((ix, b))
                off = pat[fr] if pat is not None else int(rng.choice([-2, -1, 0, 1, 2, -3000, 3000]))
                target = T + off
            else:
                target = int(rng.integers(-20000, 20000))
            t["q"][g, b], t["k_prev"][g, b] = _qk_with_score(rng, target, H, dh)
        x = rng.integers(-128, 128, size=(B, d))
        x[rng.integers(B), rng.integers(d)] = -128
        x[rng.integers(B), rng.integers(d)] = 127
        extreme = li == EXTREME_LAYER and ix in EXTREME_POSITIONS
        if extreme:
            x[:2] = -128
            t["q"][g, :2] = t["k_prev"][g, :2] = -128
        t["x"][g] = x.astype(np.int8)
        tas = quant.tas_int(t["q"][g], t["k_prev"][g])
        t["tas"][g] = tas
        key = (li, ix)
        chain = chains.get(key, np.zeros(B, np.int64))
        want = quant.replay_decision(tas, T)
        replay, forced, new_chain = quant.replay_guard(want, fr, chain, refresh_every=REFRESH_EVERY,
                                                       max_chain=MAX_CHAIN)
        chains[key] = new_chain
        t["replay"][g] = replay.astype(np.uint8)
        y = cache.get(key, np.zeros((B, d), np.int8)).copy()
        comp = np.flatnonzero(~replay)
        if comp.size:
            c = consts[li]
            y[comp] = quant.swiglu_int8(t["x"][g][comp], c["wg"], c["wu"], c["wd"], c)
            for cls in mlp_classes(t["x"][g][comp], c["wg"], c["wu"], c["wd"], c):
                classes[g] |= cls
            classes[g].add("weight=-128")
            classes[g] |= extreme_classes(t["x"][g][comp], c)
        t["y"][g] = y
        cache[key] = y
        refresh = fr % REFRESH_EVERY == 0
        if (np.abs(tas) == d * 128 * 128).any():
            classes[g].add("extreme/tas")
        for b in range(B):
            if li == 2:
                classes[g].add("tau=+inf")
            if li == 3 and fr > 0:
                classes[g].add("tau=-inf")
            if fr == 0:
                if tas[b] >= T:
                    classes[g].add("frame0/tas>=T")
                continue
            free = not refresh and chain[b] < MAX_CHAIN
            if li < 2 and free and tas[b] - T in (-1, 0, 1):
                classes[g].add({0: "tas==T", 1: "tas==T+1", -1: "tas==T-1"}[int(tas[b] - T)])
            if want[b] and not refresh and chain[b] == MAX_CHAIN:
                classes[g].add("chain==max_chain")
            if want[b] and free and chain[b] == MAX_CHAIN - 1:
                classes[g].add("chain==max_chain-1")
            if want[b] and refresh and chain[b] < MAX_CHAIN:
                classes[g].add("refresh/would-replay")
            if replay[b] and fr % REFRESH_EVERY in (1, REFRESH_EVERY - 1):
                classes[g].add("refresh/next-frame-replays")
    for name in ("wg", "wu", "wd", "mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h",
                 "mult_d", "shift_d"):
        t[name] = np.stack([np.asarray(c[name]) for c in consts])
    t["threshold"] = np.array(THRESHOLDS, np.int64)
    group_classes = [sorted(c) for c in classes]
    counts = {name: sum(name in c for c in classes) for name in CLASSES}
    missing = [n for n, v in counts.items() if v == 0]
    if missing and cfg == DEFAULT_ACCEL:
        raise RuntimeError(f"corner trace (seed {seed}) lacks the classes {missing}")
    extremes = {s: sorted({f"mult={m}" for m, _ in EXTREME_CONSTANTS} | {f"shift={s_}" for _, s_ in
                                                                         EXTREME_CONSTANTS})
                for s in ("gate", "up", "down")}
    manifest = {
        "source": "python sw/export_trace.py --corners" + ("" if cfg == DEFAULT_ACCEL else " --small"),
        "accel": cfg.to_dict(),
        "model": None,
        "dims": {"layers": L, "groups": G, "batch": B, "d_model": d, "d_ff": f, "n_heads": H, "head_dim": dh},
        "layers": L, "frames": F, "tokens_per_frame": N,
        "decode": {"prompts": [], "rows": ["constructed"] * B, "row_order": "constructed rows",
                   "cfg_scale": None, "seed": seed, "tau": None, "strict": False, "score": None,
                   "refresh_every": REFRESH_EVERY, "max_chain": MAX_CHAIN, "sparse": None,
                   "float_dtype": None},
        "integer_constants": {"file": None, "constructed": f"sw/trace/corners.py, seed {seed}"},
        "calibration_prompts": None,
        "scales": None,
        "replay_ratio": float(t["replay"].mean()),
        "replay_ratio_per_layer": [float(t["replay"][t["group_layer"] == li].mean()) for li in range(L)],
        "video_tokens": None,
        "corners": {
            "thresholds": {"0": "T = 1000", "1": "T = -777", "2": "tau = +inf: T = 2**31",
                           "3": "tau = -inf: T = -2**31"},
            "extreme_constants": {"per channel, channels 0-10 of gate, up and down (layers 0, 1, 2)":
                                  extremes["gate"],
                                  "mult_h, shift_h per layer": [list(v) for v in H_CONSTANTS],
                                  "lut per layer": ["identity", "SiLU table (s_gate 6/127, s_act 5/127)",
                                                    "negation, -(-128) clamped to 127", "a permutation"]},
            "classes": CLASSES,
            "counts": counts,
            "groups": group_classes,
        },
    }
    return manifest, t


def export_corner_trace(out, *, force: bool = False, seed: int = SEED, small: bool = False) -> dict:
    """Write the corner trace to ``out`` (atomically; ``force`` to replace); ``small``: for
    ``sw.config.SMALL_ACCEL``."""
    from sw.config import SMALL_ACCEL
    from sw.trace.decode import write_decode_trace

    manifest, t = build(seed=seed, cfg=SMALL_ACCEL if small else None)
    write_decode_trace(out, manifest, t, force=force)
    return {"out": str(out), "groups": manifest["dims"]["groups"], "counts": manifest["corners"]["counts"]}


def group_rules(manifest: dict, g: int) -> list[str]:
    """The corner classes group ``g`` exercises (empty for a trace that is not a corner trace)."""
    corners = manifest.get("corners") or {}
    groups = corners.get("groups") or []
    return list(groups[g]) if 0 <= g < len(groups) else []
