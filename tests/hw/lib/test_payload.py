"""The one payload packer (hw.lib.payload) against Amaranth's own constants (``layout.const``), the
reference that no code of the project uses."""

from pathlib import Path

import numpy as np
import pytest
from amaranth.hdl import Const

from hw.accel.accelerator import row_in_layout
from hw.board.host import row_beats
from hw.lib.payload import pack
from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.spec import quant


def const(layout, value) -> int:
    """Bits of Amaranth's own constant of ``value``."""
    return Const.cast(layout.const(value)).value & ((1 << layout.size) - 1)


def reference_rows(cfg, tr, g, threshold=None):
    lay, n = row_in_layout(cfg), int(tr.group_layer[g])
    return [const(lay, {"x": [int(v) for v in tr.x[g, b]], "q": [int(v) for v in tr.q[g, b].reshape(-1)],
                       "k": [int(v) for v in tr.k_prev[g, b].reshape(-1)],
                       "threshold": int(tr.threshold[n]) if threshold is None else threshold,
                       "layer": n, "frame": int(tr.group_frame[g]), "index": int(tr.group_index[g]),
                       "row": b})
            for b in range(tr.dims["batch"])]


def test_row_beats_match_amaranth_constants():
    from sw.trace.decode import load_decode_trace

    tr = load_decode_trace(Path(__file__).resolve().parents[3] / "golden" / "fastcar")
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
    ref = const(lay, {k: ([int(x) for x in v] if isinstance(v, np.ndarray) else v) for k, v in value.items()})
    assert pack(lay, value) == ref
    planted = dict(value, k=np.arange(d) - 47)
    assert pack(lay, planted) != ref


@pytest.mark.parametrize("field,bad", [("x", 128), ("threshold", 2 ** 33), ("frame", 256), ("row", -1)])
def test_values_that_do_not_fit_are_refused(field, bad):
    lay = row_in_layout(DEFAULT_ACCEL)
    d = DEFAULT_ACCEL.d_model
    value = {"x": np.zeros(d), "q": np.zeros(d), "k": np.zeros(d), "threshold": 0, "layer": 0, "frame": 0,
             "index": 0, "row": 0}
    value[field] = np.full(d, bad) if field == "x" else bad
    with pytest.raises(ValueError, match=field):
        pack(lay, value)


def test_control_word_keeps_its_bit_positions():
    """``chunk_rr`` is the last field of the control word, so the earlier fields keep the bit
    positions of words packed before it existed; ``config_words`` sets that bit, and only it, for
    chunk round-robin (and the ``static`` bit for static)."""
    from hw.accel.accelerator import cfg_layout, ctrl_layout
    from hw.board.host import config_words
    from tb.board.small_trace import SMALL_ACCEL as cfg
    from tests.sw.test_cycles import random_layer

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


def test_nested_structs_arrays_and_missing_fields_match_amaranth():
    from amaranth.hdl import signed, unsigned
    from amaranth.lib import data

    lay = data.StructLayout({"x": data.ArrayLayout(signed(8), 4), "t": signed(12), "u": unsigned(3),
                             "n": data.StructLayout({"a": data.ArrayLayout(unsigned(5), 3), "b": 1})})
    value = {"x": [-128, 5, 127, -1], "t": -2048, "u": 7, "n": {"a": [31, 0, 17], "b": 1}}
    assert pack(lay, value) == const(lay, value)
    assert pack(lay, {**value, "x": np.array(value["x"])}) == const(lay, value)
    assert pack(lay, {"t": 3}) == const(lay, {"t": 3})                   # missing fields are 0
    arr = data.ArrayLayout(data.StructLayout({"p": unsigned(3), "q": signed(4)}), 2)
    v = [{"p": 1, "q": -2}, {"p": 7, "q": 7}]
    assert pack(arr, v) == const(arr, v)
    with pytest.raises(ValueError, match=r"\[1\].q"):
        pack(arr, [{"p": 1, "q": -2}, {"p": 7, "q": 8}])


def test_leaves_by_dotted_name_round_trip():
    from amaranth.hdl import signed
    from amaranth.lib import data

    from hw.lib.payload import fields, pack_fields, unpack_field

    lay = data.StructLayout({"data": data.StructLayout({"y": data.ArrayLayout(signed(8), 3)}), "last": 1})
    fl = fields(lay)
    assert set(fl) == {"data.y.0", "data.y.1", "data.y.2", "last"}
    word = pack_fields(fl, **{"data.y.1": -5, "last": 1})
    assert word == const(lay, {"data": {"y": [0, -5, 0]}, "last": 1})
    assert unpack_field(fl, word, "data.y.1") == -5 and unpack_field(fl, word, "data.y.0") == 0
