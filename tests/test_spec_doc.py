"""docs/quantization.md is the complete contract: its Python blocks, run on their own (nothing of
the project imported), reproduce traces the exporter makes, bit for bit: every TAS, replay bit,
threshold and MLP output of the corner trace (which uses the drift guard), of a model export
with the drift guard, and of part of the shipped trace."""

import re
from pathlib import Path

import pytest

from sw.trace.decode import load_decode_trace, select_groups

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "quantization.md"


def doc_namespace() -> dict:
    """The functions the page defines, executed from its ```python blocks alone."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4, "docs/quantization.md lost its Python blocks"
    ns: dict = {}
    exec(compile("\n\n".join(blocks), str(DOC), "exec"), ns)   # noqa: S102 - the doc's own code
    for name in ("requant", "swiglu", "tas", "threshold", "decode_group"):
        assert callable(ns.get(name)), f"docs/quantization.md defines no {name}()"
    return ns


def reproduce(tr, groups, ns) -> str | None:
    """Run the doc's decode_group over ``groups`` (in decode order); None when every value matches."""
    decode = tr.manifest["decode"]
    refresh_every, max_chain = decode.get("refresh_every"), decode.get("max_chain")
    L = tr.dims["layers"]
    if decode.get("tau") is not None:
        for li in range(L):
            s = tr.manifest["scales"][li]
            T = ns["threshold"](decode["tau"][li], s["s_q"], s["s_k"], tr.dims["n_heads"],
                                tr.dims["head_dim"], decode["strict"])
            if T != int(tr.threshold[li]):
                return f"layer {li}: threshold {T} from the page, {int(tr.threshold[li])} in the trace"
    consts = []
    for li in range(L):
        c = {k: v.tolist() for k, v in tr.layer_consts(li).items()}
        c.update(wg=tr.wg[li].tolist(), wu=tr.wu[li].tolist(), wd=tr.wd[li].tolist())
        consts.append(c)
    state = {"chain": {}, "cache": {}}
    for g in groups:
        li, fr, ix = int(tr.group_layer[g]), int(tr.group_frame[g]), int(tr.group_index[g])
        rows = [{"x": tr.x[g, b].tolist(), "q": tr.q[g, b].reshape(-1).tolist(),
                 "k_prev": tr.k_prev[g, b].reshape(-1).tolist()} for b in range(tr.dims["batch"])]
        out = ns["decode_group"](rows, li, fr, ix, consts[li], int(tr.threshold[li]), state,
                                 refresh_every=refresh_every, max_chain=max_chain)
        for b, (S, replay, y) in enumerate(out):
            at = f"group {g} (layer {li}, frame {fr}, index {ix}) row {b}"
            if S != int(tr.tas[g, b]):
                return f"{at}: tas {S} from the page, {int(tr.tas[g, b])} in the trace"
            if int(replay) != int(tr.replay[g, b]):
                return f"{at}: replay {int(replay)} from the page, {int(tr.replay[g, b])} in the trace"
            if y != tr.y[g, b].tolist():
                return f"{at}: y differs from the page's"
    return None


@pytest.fixture(scope="module")
def ns():
    return doc_namespace()


def test_page_reproduces_the_corner_trace(ns):
    tr = load_decode_trace(REPO / "golden" / "corners")
    assert tr.manifest["decode"]["refresh_every"] and tr.manifest["decode"]["max_chain"]
    assert reproduce(tr, range(tr.dims["groups"]), ns) is None


def test_page_reproduces_the_shipped_trace(ns):
    """Positions 0 and 1 of every frame and layer (self-contained: a position only replays its own
    outputs), and the thresholds from tau and the scales."""
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    assert reproduce(tr, select_groups(tr, "first:2"), ns) is None


def test_page_reproduces_an_export_with_the_drift_guard(ns, tiny_ckpt, tmp_path):
    from sw.trace.export import export_decode_trace

    export_decode_trace(tmp_path / "g", checkpoint=tiny_ckpt, frames=5, tau=0.0, refresh_every=3,
                        max_chain=1, progress=False)
    tr = load_decode_trace(tmp_path / "g")
    rep = tr.replay.astype(bool)
    assert rep.any() and not rep.all()
    assert reproduce(tr, range(tr.dims["groups"]), ns) is None


def test_the_check_fails_on_a_page_with_another_rule(ns):
    """The reproduction is able to fail: the page's code with '>' for '>=' or with ties away from
    zero no longer reproduces the corner trace."""
    tr = load_decode_trace(REPO / "golden" / "corners")
    text = DOC.read_text()
    for old, new in (("want = S >= T", "want = S > T"),
                     ("(r == h and q % 2 == 1)", "(r == h and p > 0)"),
                     ("chain >= max_chain", "chain > max_chain")):
        assert old in text, old
        blocks = re.findall(r"```python\n(.*?)```", text.replace(old, new), flags=re.S)
        bad: dict = {}
        exec(compile("\n\n".join(blocks), "mutated", "exec"), bad)   # noqa: S102
        assert reproduce(tr, range(tr.dims["groups"]), bad) is not None, new


def test_page_states_the_decoder_layer_rules_as_the_code_does(ns):
    """The page's RMSNorm, RoPE, softmax and division against sw.spec.quant's, on random integers."""
    import numpy as np

    from sw.spec import quant

    rng = np.random.default_rng(3)
    for _ in range(20):
        n, d = int(rng.integers(-10**7, 10**7)), int(rng.integers(1, 999))
        assert ns["div_rne"](n, d) == int(quant.div_rne(n, d))
    for (n, d) in ((5, 2), (7, 2), (-5, 2), (-7, 2)):
        assert ns["div_rne"](n, d) == int(quant.div_rne(n, d))
    r = rng.integers(-30000, 30000, size=(4, 96))
    mult, shift = rng.integers(1, 65536, size=96), rng.integers(0, 34, size=96)
    want = quant.rmsnorm_int(r, mult, shift, eps=7)
    for b in range(4):
        assert ns["rmsnorm"](r[b].tolist(), mult.tolist(), shift.tolist(), 7) == want[b].tolist()
    x = rng.integers(-128, 128, size=24)
    C, S = rng.integers(-(1 << 14), (1 << 14) + 1, size=(2, 12))
    assert ns["rope"](x.tolist(), C.tolist(), S.tolist()) == quant.rope_int(x, C, S).tolist()
    table = quant.exp2_table()
    scores, v = rng.integers(-5000, 5000, size=37), rng.integers(-128, 128, size=(37, 24))
    o, E = quant.softmax_av_int(scores, v, 311, table)
    o2, E2 = ns["softmax_av"](scores.tolist(), v.tolist(), 311, table.tolist())
    assert o2 == o.tolist() and E2 == int(E)
    assert ns["attention_out"](o2, E2, 40000, 3) == quant.attention_out_int(o, E, 40000, 3).tolist()


def test_page_samples_as_the_code_does(ns):
    """The page's sampler draws the golden sampler's tokens and advances its generator alike, with
    and without guidance and greedy; a page with the draw's tables swapped does not."""
    import numpy as np

    from sw.golden import sampling
    from sw.spec import quant

    rng = np.random.default_rng(4)
    tables = ns["noise_tables"]()
    assert [list(t) for t in quant.noise_tables()] == [list(t) for t in tables]
    scale = rng.uniform(1e-3, 3e-3, size=40)
    for cfg in (1.5, None):
        for temperature in (1.0, 0.0):
            sam = sampling.IntegerSampler(scale, seed=9, batch=2, cfg_scale=cfg, temperature=temperature)
            state = list(sam.streams.state)
            g = None if cfg is None else quant.cfg_gain(cfg)
            for _ in range(6):
                acc = rng.integers(-4000, 4000, size=(4, 40))
                want = sam(acc[:2], acc[2:] if cfg else None)
                for b in range(2):
                    tok, state[b] = ns["sample"](acc[b].tolist(), acc[2 + b].tolist() if cfg else None,
                                                 sam.mult.tolist(), sam.shift.tolist(), g, state[b], tables,
                                                 greedy=temperature == 0)
                    assert tok == int(want[b])
                assert state == sam.streams.state
    swapped = (tables[1], tables[0])
    acc = rng.integers(-4000, 4000, size=(50, 40))
    sam = sampling.IntegerSampler(scale, seed=9, batch=1)
    st, diff = sam.streams.state[0], 0
    for a in acc:
        tok, st = ns["sample"](a.tolist(), None, sam.mult.tolist(), sam.shift.tolist(), None, st, swapped)
        diff += tok != int(sam(a[None])[0])
    assert diff > 0
