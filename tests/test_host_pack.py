"""The fast row packer of the host side (hw.board.host.pack_struct) against Amaranth's own constants."""

from pathlib import Path

import numpy as np
import pytest

from hw.accel.accelerator import row_in_layout
from hw.accel.payload import pack
from hw.board.host import pack_struct, row_beats
from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.spec import quant


def reference_rows(cfg, tr, g, threshold=None):
    lay, n = row_in_layout(cfg), int(tr.group_layer[g])
    return [pack(lay, {"x": [int(v) for v in tr.x[g, b]], "q": [int(v) for v in tr.q[g, b].reshape(-1)],
                       "k": [int(v) for v in tr.k_prev[g, b].reshape(-1)],
                       "threshold": int(tr.threshold[n]) if threshold is None else threshold,
                       "layer": n, "frame": int(tr.group_frame[g]), "index": int(tr.group_index[g]),
                       "row": b})
            for b in range(tr.dims["batch"])]


def test_row_beats_match_amaranth_constants():
    from sw.trace.decode import load_decode_trace

    tr = load_decode_trace(Path(__file__).resolve().parent.parent / "golden" / "fastcar")
    for g in range(0, len(tr.group_layer), 97):
        for threshold in (None, quant.THRESHOLD_NEVER, -(2 ** 31)):
            got = [bits for bits, _ in row_beats(DEFAULT_ACCEL, tr, g, threshold=threshold)]
            assert got == reference_rows(DEFAULT_ACCEL, tr, g, threshold), (g, threshold)


def test_extremes_and_a_planted_difference():
    cfg = AccelConfig.from_dict(DEFAULT_ACCEL.to_dict())
    lay = row_in_layout(cfg)
    d = cfg.d_model
    value = {"x": np.full(d, -128), "q": np.full(d, 127), "k": np.arange(d) - 48, "threshold": -(2 ** 33),
             "layer": cfg.layers - 1, "frame": 255, "index": cfg.tokens_per_frame - 1, "row": cfg.batch - 1}
    ref = pack(lay, {k: ([int(x) for x in v] if isinstance(v, np.ndarray) else v) for k, v in value.items()})
    assert pack_struct(lay, value) == ref
    planted = dict(value, k=np.arange(d) - 47)
    assert pack_struct(lay, planted) != ref


@pytest.mark.parametrize("field,bad", [("x", 128), ("threshold", 2 ** 33), ("frame", 256), ("row", -1)])
def test_values_that_do_not_fit_are_refused(field, bad):
    lay = row_in_layout(DEFAULT_ACCEL)
    d = DEFAULT_ACCEL.d_model
    value = {"x": np.zeros(d), "q": np.zeros(d), "k": np.zeros(d), "threshold": 0, "layer": 0, "frame": 0,
             "index": 0, "row": 0}
    value[field] = np.full(d, bad) if field == "x" else bad
    with pytest.raises(ValueError, match=field):
        pack_struct(lay, value)


def test_control_word_keeps_its_bit_positions():
    """``chunk_rr`` is the last field of the control word, so the earlier fields keep the bit
    positions of words packed before it existed; ``config_words`` sets that bit, and only it, for
    chunk round-robin (and the ``static`` bit for static)."""
    from hw.accel.accelerator import cfg_layout, ctrl_layout
    from hw.board.host import config_words
    from tb.board.small_trace import SMALL_ACCEL as cfg
    from tests.test_cycles import random_layer

    lay = ctrl_layout()
    assert {n: lay[n].offset for n in lay.members} == {
        "static": 0, "refresh_en": 1, "refresh_every": 2, "max_chain_en": 10, "max_chain": 11, "chunk_rr": 19}
    rng = np.random.default_rng(0)
    layers = [random_layer(rng, cfg.d_model, cfg.d_ff) for _ in range(cfg.layers)]
    base, rr, static = (config_words(cfg, layers, **kw)[-1]
                        for kw in ({}, {"chunk_rr": True}, {"static": True}))
    data = cfg_layout(cfg)["data"].offset
    assert rr ^ base == 1 << (data + lay["chunk_rr"].offset), "chunk_rr: not (only) the chunk_rr bit"
    assert static ^ base == 1 << (data + lay["static"].offset), "static: not (only) the static bit"
