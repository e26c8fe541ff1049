"""cocotb test of the AXI4 read manager (``hw.lib.axi_reader.AxiReader`` behind its adapter) against
cocotbext-axi's ``AxiRamRead``: random regions (1 to 300 words, some across 4 KB boundaries, some
of one word) read from a memory of random bytes; each region's words must come out in order with
``tlast`` on its last. A monitor checks every burst request: incrementing, full-width, at most
``max_burst`` words, never across a 4 KB boundary. Pauses on the memory's AR and R channels (the
SDRAM's bandwidth) and on the output (the run's :class:`sw.config.BenchConfig`: ``stall``, ``seed``;
``burst`` and ``count_bits``: the build's).

``plant`` = ``N``: the expected word N of the first region changed (the check must fail).
"""

import random

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus, AxiStreamFrame

from hw.lib.axi import BOUNDARY_BYTES
from hw.lib.axi_reader import read_command_layout
from hw.lib.payload import fields, pack_fields
from tb.runner import bench_config
from tb.stalls import random_pauses
from tb.step.bench import Bench, burst_monitor, stall_settings

MEM_BYTES = 1 << 16


@cocotb.test()
async def reader_regions(dut):
    aw, dw = len(dut.m_axi_araddr), len(dut.m_axi_rdata)
    nb = dw // 8
    config = bench_config()
    max_burst, count_bits = config.require("burst"), config.require("count_bits")
    p, seed = stall_settings()
    rng = random.Random(seed)

    bench = Bench(dut)
    ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM_BYTES)
    ram.log.setLevel("WARNING")
    if p:
        ram.ar_channel.set_pause_generator(random_pauses(seed + 21, p))
        ram.r_channel.set_pause_generator(random_pauses(seed + 22, p))
    mem = bytes(rng.getrandbits(8) for _ in range(MEM_BYTES))
    ram.write(0, mem)
    await bench.reset()

    regions = [(BOUNDARY_BYTES - 3 * nb, 20), (0, 1), (2 * BOUNDARY_BYTES - nb, 2)]   # across, one word
    while len(regions) < 40:
        words = rng.choice([1, 2, 7, 16, 17, 64, 129, 300])
        addr = rng.randrange(0, MEM_BYTES - words * nb) // nb * nb
        regions.append((addr, words))

    bursts = []

    cocotb.start_soon(burst_monitor(dut, "ar", nb, max_burst, bursts))
    f_cmd = fields(read_command_layout(aw, count_bits))
    for addr, words in regions:
        await bench.src.send(AxiStreamFrame([pack_fields(f_cmd, addr=addr, words=words)]))

    plant = config.plant
    for k, (addr, words) in enumerate(regions):
        frame = await bench.sink.recv()
        got = [int(w) & ((1 << dw) - 1) for w in frame.tdata]
        want = [int.from_bytes(mem[addr + j * nb:addr + (j + 1) * nb], "little") for j in range(words)]
        if plant and k == 0:
            want[int(plant)] ^= 1
        assert len(got) == words, f"region {k} ({words} words at {addr:#x}): {len(got)} words out"
        for j, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g == w, f"region {k} ({words} words at {addr:#x}), word {j}: RTL {g:#x}, memory {w:#x}"
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert bench.sink.empty(), "more words out than regions in"
    assert int(dut.error.value) == 0, "error set without an error response"
    total = sum(w for _, w in regions)
    assert sum(n for _, n in bursts) == total, f"{sum(n for _, n in bursts)} words requested, {total} read"
    dut._log.info(f"axi_reader: {len(regions)} regions, {total} words in {len(bursts)} bursts bit-exact")
