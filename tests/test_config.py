import json

import pytest

from sw.config import DEFAULT_TILE, ConfigError, TileConfig


def test_default_tile_is_consistent():
    c = DEFAULT_TILE
    assert c.k_dim % c.rows == 0 and c.n_dim % c.cols == 0
    assert c.weight_depth == c.k_tiles * c.n_tiles
    assert c.cycles(5) == 5 * c.k_tiles * c.n_tiles


@pytest.mark.parametrize("kw,msg", [
    ({"k_dim": 6, "rows": 4}, "k_dim=6 is not a multiple of rows=4"),
    ({"n_dim": 5, "cols": 4}, "n_dim=5 is not a multiple of cols=4"),
    ({"rows": 0}, "'rows' must be a positive integer"),
    ({"rows": 1, "k_dim": 131072}, "k_dim=131072 could overflow the int32 accumulator"),
    ({"acc_bits": 24}, "acc_bits=24 differs from the quantisation spec"),
])
def test_bad_config_is_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        TileConfig(**kw)


def test_config_json_errors_name_the_file(tmp_path):
    p = tmp_path / "tile.json"
    p.write_text(json.dumps({"rows": 4, "cols": 4, "k_dim": 64, "n_dim": 32, "depth": 3}))
    with pytest.raises(ConfigError, match=r"tile.json: unknown tile config field\(s\) \['depth'\]"):
        TileConfig.from_json(p)
    p.write_text("{")
    with pytest.raises(ConfigError, match="tile.json: not valid JSON"):
        TileConfig.from_json(p)
    with pytest.raises(ConfigError, match="no such config file"):
        TileConfig.from_json(tmp_path / "missing.json")
    p.write_text(json.dumps({"rows": 1, "k_dim": 200000}))
    with pytest.raises(ConfigError, match="tile.json: tile config: k_dim=200000 could overflow"):
        TileConfig.from_json(p)


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
    assert c.mv_macs == 128
    # GU pass: (96 / 8 inputs) x (32 / 8 outputs) x gate and up; D pass: (32 / 8) x (96 / 8).
    assert c.mv_blocks_per_chunk == (96, 48)
    assert c.mv_weight_blocks == 4 * 8 * 144
    assert (c.gu_sum_bits, c.row_sum_bits) == (22, 24)
