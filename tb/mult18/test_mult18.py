"""pytest driver: the MULT18X18D instance (with its simulation model) against Mult18's model."""

from pathlib import Path

import pytest

from hw.lib.mult18 import Mult18Pair
from sw.config import BenchConfig
from tb.runner import BUILD, available_simulators, run_cocotb

HERE = Path(__file__).resolve().parent
SIMS = available_simulators()


@pytest.mark.parametrize("sim", SIMS)
def test_primitive_equals_model(sim):
    assert run_cocotb(lambda: Mult18Pair(), toplevel="mult18_pair", test_module="cocotb_mult18",
                      test_dir=HERE, build_dir=BUILD / "mult18" / sim, sim=sim, bench=BenchConfig(seed=1),
                      extra_sources=[HERE / "MULT18X18D.v"], key="mult18_pair", public="ports") == 1
