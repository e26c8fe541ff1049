import json

import pytest

from sw.config import DEFAULT_ACCEL, AccelConfig, ConfigError


@pytest.mark.parametrize("kw,msg", [
    ({"chunks": 7}, "d_ff=256 is not a multiple of chunks=7"),
    ({"batch": 3}, "batch=3 is not a power of two"),
    ({"tas_lanes": 0}, "'tas_lanes' must be a positive integer"),
    ({"d_ff": 131072, "chunks": 1}, "d_ff=131072 could overflow the int32 accumulator"),
])
def test_bad_accel_config_is_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        AccelConfig(**kw)


def test_bad_config_file_names_file_and_field(tmp_path):
    p = tmp_path / "accel.json"
    p.write_text(json.dumps({**DEFAULT_ACCEL.to_dict(), "rows": 4}))
    with pytest.raises(ConfigError, match=r"accel.json: unknown accelerator config field\(s\) \['rows'\]"):
        AccelConfig.from_json(p)
    p.write_text("{nope")
    with pytest.raises(ConfigError, match="accel.json: not valid JSON"):
        AccelConfig.from_json(p)
    with pytest.raises(ConfigError, match="missing.json"):
        AccelConfig.from_json(tmp_path / "missing.json")
    p.write_text(json.dumps({"d_ff": 200000, "chunks": 1}))
    with pytest.raises(ConfigError, match="accel.json: accelerator config: d_ff=200000 could overflow"):
        AccelConfig.from_json(p)
    assert AccelConfig.from_dict(DEFAULT_ACCEL.to_dict()) == DEFAULT_ACCEL


@pytest.mark.parametrize("kw,msg", [
    ({"mv_in": 5}, "d_model=96 is not a multiple of 5"),
    ({"mv_out": 32, "chunks": 16}, "d_ff / chunks=16 is not a multiple of 32"),
])
def test_bad_mv_geometry_is_refused(kw, msg):
    from sw.config import AccelConfig, ConfigError
    with pytest.raises(ConfigError, match=msg):
        AccelConfig(**kw)


def test_mv_geometry_of_the_default():
    from sw.config import DEFAULT_ACCEL as c
    assert c.mac_units == 128
    # GU pass: (96 / 8 inputs) x (32 / 8 outputs) x gate and up; D pass: (32 / 8) x (96 / 8).
    assert c.mv_blocks_per_chunk == (96, 48)
    assert c.mv_weight_blocks == 4 * 8 * 144
    assert (c.gu_sum_bits, c.row_sum_bits) == (22, 24)


def test_trace_accel_is_the_manifest_field_or_the_default():
    from sw.config import DEFAULT_ACCEL, SMALL_ACCEL, trace_accel

    assert trace_accel({"dims": {"d_model": 96}}) == DEFAULT_ACCEL
    assert trace_accel({"accel": SMALL_ACCEL.to_dict(), "dims": {"d_model": 16, "d_ff": 48}}) == SMALL_ACCEL
    with pytest.raises(ConfigError, match="trace manifest field 'accel': d_model=16, but the trace's dims have "
                                          "d_model=96"):
        trace_accel({"accel": SMALL_ACCEL.to_dict(), "dims": {"d_model": 96}})
    with pytest.raises(ConfigError, match="trace manifest field 'accel': .*'chunks' must be a positive integer"):
        trace_accel({"accel": {**SMALL_ACCEL.to_dict(), "chunks": 0}})
