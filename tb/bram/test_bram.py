"""pytest driver: DP16KD instances (with their simulation model) against Bram's model, several
configurations side by side in one simulation (one simulator build instead of one each)."""

from pathlib import Path

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.lib.bram import BramPair, BramTdpPair
from sw.config import BenchConfig
from tb.bram.cocotb_bram import init_words
from tb.runner import BUILD, available_simulators, run_cocotb

HERE = Path(__file__).resolve().parent
SIMS = available_simulators()
#: (width, depth): every DATA_WIDTH of the block, the 18-bit one filled (every address bit), a
#: 13-bit word in the 18-bit configuration, and depths that are not powers of two. Small, because
#: the C++ compile of the model memories' initial contents is most of Verilator's build time.
CONFIGS = [(18, 1024), (9, 256), (4, 256), (2, 128), (1, 100), (13, 200)]


#: (width, depth) of the true dual-port pairs: the 18-bit configuration filled, 9 bits in the
#: 2,048 x 9 configuration, and a 13-bit word in a depth that is not a power of two.
TDP_CONFIGS = [(18, 1024), (9, 2048), (13, 200)]


class BramPairs(wiring.Component):
    """One :class:`BramPair` (or ``pair`` class) per configuration, its ports prefixed ``c<i>_``."""

    def __init__(self, configs, pair=BramPair):
        self._pairs = [pair(w, d, init=init_words(w, d)) for w, d in configs]
        super().__init__({f"c{i}_{name}": member for i, pair in enumerate(self._pairs)
                          for name, member in pair.signature.members.items()})

    def elaborate(self, platform):
        m = Module()
        for i, pair in enumerate(self._pairs):
            m.submodules[f"c{i}"] = pair
            for name, member in pair.signature.members.items():
                mine, theirs = getattr(self, f"c{i}_{name}"), getattr(pair, name)
                m.d.comb += theirs.eq(mine) if member.flow == In else mine.eq(theirs)
        return m


@pytest.mark.parametrize("sim", SIMS)
def test_primitive_equals_model(sim):
    assert run_cocotb(lambda: BramPairs(CONFIGS), toplevel="bram_pairs", test_module="cocotb_bram",
                      test_dir=HERE, build_dir=BUILD / "bram" / sim, sim=sim,
                      bench=BenchConfig(bram=CONFIGS),
                      extra_sources=[HERE / "DP16KD.v"], key=("bram_pairs", CONFIGS),
                      public="ports") == 1


@pytest.mark.parametrize("sim", SIMS)
def test_tdp_primitive_equals_model(sim):
    assert run_cocotb(lambda: BramPairs(TDP_CONFIGS, BramTdpPair), toplevel="bram_tdp_pairs",
                      test_module="cocotb_bram_tdp", test_dir=HERE, build_dir=BUILD / "bram_tdp" / sim,
                      sim=sim,
                      bench=BenchConfig(bram=TDP_CONFIGS),
                      extra_sources=[HERE / "DP16KD.v"], key=("bram_tdp_pairs", TDP_CONFIGS),
                      public="ports") == 1
