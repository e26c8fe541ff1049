"""cocotb test of the AXI4 write manager (``hw.lib.axi_writer.AxiWriter`` behind its adapter) against
cocotbext-axi's ``AxiRamWrite``: random regions (1 to 300 words, some across 4 KB boundaries, none
overlapping) written with random words; once every region is reported, the memory must hold exactly
those words and nothing else must have changed. A monitor checks every burst: incrementing,
full-width, at most ``max_burst`` words, never across a 4 KB boundary. Pauses on the memory's AW,
W and B channels and on the inputs and the report output (the run's :class:`sw.config.BenchConfig`:
``stall``, ``seed``; ``burst`` and ``count_bits``: the build's).

``plant`` = ``N``: the expected word N of the first region changed (the check must fail).
"""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiRamWrite, AxiStreamFrame, AxiStreamSink, AxiStreamSource, AxiWriteBus

from hw.lib.axi import BOUNDARY_BYTES
from hw.lib.axi_reader import read_command_layout
from hw.lib.payload import fields, pack_fields
from tb.runner import bench_config
from tb.stalls import random_pauses
from tb.step.bench import CLOCK_NS, Bench, burst_monitor, stall_settings, stream_model

MEM_BYTES = 1 << 16


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.cmd = stream_model(AxiStreamSource, dut, "s_axis_i", stall_seed=0)
        self.w = stream_model(AxiStreamSource, dut, "s_axis_w", stall_seed=3)
        self.done = stream_model(AxiStreamSink, dut, "m_axis_o", stall_seed=7)

    reset = Bench.reset


@cocotb.test()
async def writer_regions(dut):
    aw, dw = len(dut.m_axi_awaddr), len(dut.m_axi_wdata)
    nb = dw // 8
    config = bench_config()
    max_burst, count_bits = config.require("burst"), config.require("count_bits")
    p, seed = stall_settings()
    rng = random.Random(seed)

    tb = TB(dut)
    ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM_BYTES)
    ram.log.setLevel("WARNING")
    if p:
        ram.aw_channel.set_pause_generator(random_pauses(seed + 21, p))
        ram.w_channel.set_pause_generator(random_pauses(seed + 22, p))
        ram.b_channel.set_pause_generator(random_pauses(seed + 23, p))
    before = bytes(rng.getrandbits(8) for _ in range(MEM_BYTES))
    ram.write(0, before)
    await tb.reset()

    # Regions that do not overlap: the first across a 4 KB boundary, one of a single word.
    regions = [(BOUNDARY_BYTES - 3 * nb, 20), (2 * BOUNDARY_BYTES - nb, 2), (5 * BOUNDARY_BYTES, 1)]
    used = [(a, a + w * nb) for a, w in regions]
    while len(regions) < 40:
        words = rng.choice([1, 2, 7, 16, 17, 64, 129, 300])
        addr = rng.randrange(0, MEM_BYTES - words * nb) // nb * nb
        if all(addr + words * nb <= lo or addr >= hi for lo, hi in used):
            regions.append((addr, words))
            used.append((addr, addr + words * nb))
    data = [[rng.getrandbits(dw) for _ in range(w)] for _, w in regions]

    bursts = []

    cocotb.start_soon(burst_monitor(dut, "aw", nb, max_burst, bursts))
    f_cmd = fields(read_command_layout(aw, count_bits))
    for (addr, words), ws in zip(regions, data, strict=True):
        await tb.cmd.send(AxiStreamFrame([pack_fields(f_cmd, addr=addr, words=words)]))
        await tb.w.send(AxiStreamFrame(ws))
    for k in range(len(regions)):
        frame = await tb.done.recv()
        assert int(frame.tdata[0]) & 1 == 0, f"region {k}: reported an error"
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert tb.done.empty(), "more reports than regions"
    assert int(dut.error.value) == 0, "error set without an error answer"

    want = bytearray(before)
    for (addr, _), ws in zip(regions, data, strict=True):
        for j, v in enumerate(ws):
            want[addr + j * nb: addr + (j + 1) * nb] = v.to_bytes(nb, "little")
    plant = config.plant
    if plant:
        a0 = regions[0][0] + int(plant) * nb
        want[a0] ^= 1
    got = ram.read(0, MEM_BYTES)
    if got != bytes(want):
        first = next(i for i in range(MEM_BYTES) if got[i] != want[i])
        k = next((k for k, (a, w) in enumerate(regions) if a <= first < a + w * nb), None)
        if k is None:
            where = "outside every region"
        else:
            a, w = regions[k]
            where = f"region {k} ({w} words at {a:#x}), word {(first - a) // nb}"
        raise AssertionError(f"memory at {first:#x}, {where}: RTL wrote {got[first]:#04x}, "
                             f"expected {want[first]:#04x}")
    total = sum(w for _, w in regions)
    burst_words = sum(n for _, n in bursts)
    assert burst_words == total, f"{burst_words} words in bursts, {total} to write"
    dut._log.info(f"axi_writer: {len(regions)} regions, {total} words in {len(bursts)} bursts bit-exact")
