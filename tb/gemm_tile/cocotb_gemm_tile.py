"""cocotb tests of the GEMM tile (through its AXI-Stream adapter), bit for bit against the golden
model and the stored trace. Driven by ``test_gemm_tile.py``; configuration comes in through the
environment:

``FASTCAR_TILE``   tile geometry as JSON (must match the Verilog that was built)
``FASTCAR_TRACE``  trace directory to check against (its stored ``y`` is the expectation), or
``FASTCAR_RANDOM`` a seed: random int8 data and parameters, checked against the golden model
``FASTCAR_SEED``   seed of the idle/backpressure generators
"""

import json
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamMonitor, AxiStreamSink, AxiStreamSource

from hw.accel.payload import pack_int8, rq_words, weight_words
from hw.lib.axis_adapter import axis_width
from sw.config import TileConfig
from sw.golden import quant
from sw.trace.decode import gemm_case, load_decode_trace
from sw.trace.store import first_mismatch, load_trace, trace_kind
from tb.stalls import random_pauses


class TB:
    """Clock, reset and cocotbext-axi bus models around ``gemm_tile_axis``."""

    def __init__(self, dut, cfg: TileConfig):
        self.dut = dut
        self.cfg = cfg
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())

        def bus(prefix):
            return AxiStreamBus.from_prefix(dut, prefix)

        self.x_src = AxiStreamSource(bus("s_axis_i"), dut.clk, dut.rst)
        self.w_src = AxiStreamSource(bus("s_axis_w"), dut.clk, dut.rst)
        self.rq_src = AxiStreamSource(bus("s_axis_rq"), dut.clk, dut.rst)
        self.y_sink = AxiStreamSink(bus("m_axis_o"), dut.clk, dut.rst)
        self.x_mon = AxiStreamMonitor(bus("s_axis_i"), dut.clk, dut.rst)
        for h in (self.x_src, self.w_src, self.rq_src, self.y_sink, self.x_mon):
            h.log.setLevel("WARNING")

    def set_idle(self, seed, p):
        self.x_src.set_pause_generator(random_pauses(seed, p) if p else None)

    def set_backpressure(self, seed, p):
        self.y_sink.set_pause_generator(random_pauses(seed, p) if p else None)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def load(self, w, mult, shift):
        """Weights and requantisation parameters, one frame of words each."""
        for src, words, name in ((self.w_src, weight_words(w, self.cfg), "w"),
                                 (self.rq_src, rq_words(mult, shift, self.cfg), "rq")):
            nbytes = axis_width(len(src.bus.tdata)) // 8
            await src.send(AxiStreamFrame(b"".join(v.to_bytes(nbytes, "little") for v in words)))
            await src.wait()
            assert nbytes * 8 == len(src.bus.tdata), f"{name}: tdata not byte aligned"


def case_from_env(cfg):
    """(x, w, mult, shift, expected y or None, label) from the environment."""
    if "FASTCAR_TRACE" in os.environ:
        path = os.environ["FASTCAR_TRACE"]
        if trace_kind(path) == "fastcar_decode":
            # A real decode trace: layer 0's gate projection on the rows it really computed.
            tr = load_decode_trace(path)
            x, w, mult, shift, y = gemm_case(tr, layer=0, max_rows=int(os.environ.get("FASTCAR_ROWS", "16")))
            return x, w, mult, shift, y, f"{path}: layer 0 gate projection"
        tr = load_trace(path, cfg)
        return tr.x, tr.w, tr.mult, tr.shift, tr.y, str(tr.path / "y.npy")
    rng = np.random.default_rng(int(os.environ["FASTCAR_RANDOM"]))
    b = int(os.environ.get("FASTCAR_BATCH", "12"))
    x = rng.integers(-128, 128, size=(b, cfg.k_dim)).astype(np.int8)
    w = rng.integers(-128, 128, size=(cfg.k_dim, cfg.n_dim)).astype(np.int8)
    x[0, :] = -128           # extremes: -128 * -128 on every product of one row
    w[:, 0] = -128
    mult = rng.integers(0, quant.MULT_MAX + 1, size=cfg.n_dim).astype(np.uint16)
    shift = rng.integers(0, quant.SHIFT_MAX + 1, size=cfg.n_dim).astype(np.uint8)
    shift[: cfg.n_dim // 2] = rng.integers(10, 24, size=cfg.n_dim // 2)  # mostly unsaturated
    return x, w, mult, shift, None, "random data"


@cocotb.test()
@cocotb.parametrize(idle=[0.0, 0.4], backpressure=[0.0, 0.5])
async def run_gemm(dut, idle, backpressure):
    cfg = TileConfig.from_dict(json.loads(os.environ["FASTCAR_TILE"]))
    seed = int(os.environ.get("FASTCAR_SEED", "1"))
    x, w, mult, shift, stored, label = case_from_env(cfg)

    tb = TB(dut, cfg)
    tb.set_idle(seed, idle)
    tb.set_backpressure(seed + 1, backpressure)
    await tb.reset()
    await tb.load(w, mult, shift)

    # Scoreboard: the model is fed from the input monitor, not from what we meant to send.
    expected = []

    async def model():
        while True:
            frame = await tb.x_mon.recv()
            xin = np.frombuffer(bytes(frame.tdata), dtype=np.int8)[: cfg.k_dim]
            expected.append(quant.gemm_int8(xin[None, :], w, mult, shift)[0])

    cocotb.start_soon(model())
    for row in x:
        await tb.x_src.send(AxiStreamFrame(pack_int8(row).to_bytes(cfg.k_dim, "little")))

    got = []
    budget = 20 * len(x) * cfg.k_tiles * cfg.n_tiles + 200
    for _ in range(len(x)):
        frame = await with_timeout(tb.y_sink.recv(), budget * 10, "ns")
        got.append(np.frombuffer(bytes(frame.tdata), dtype=np.int8)[: cfg.n_dim])
    # Anything more would be a duplicated row.
    await ClockCycles(dut.clk, 4 * (cfg.rows + cfg.cols + 10))
    await RisingEdge(dut.clk)
    extra = tb.y_sink.count()
    assert extra == 0, f"{extra} rows out beyond the {len(x)} sent"
    assert len(expected) == len(x), f"input monitor saw {len(expected)} rows, {len(x)} were sent"

    got = np.array(got)
    msg = first_mismatch(got, np.array(expected), "y")
    if msg:
        dut._log.error("got\n%s\nexpected\n%s", got, np.array(expected))
    assert msg is None, f"RTL vs golden model: {msg}"
    if stored is not None:
        msg = first_mismatch(got, stored, "y")
        assert msg is None, f"RTL vs {label}: {msg}"
    dut._log.info("%d rows bit-exact (%s), idle=%s backpressure=%s", len(x), label, idle, backpressure)
