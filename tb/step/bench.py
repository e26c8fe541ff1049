"""What the step's cocotb testbenches share (payloads are packed by :mod:`hw.lib.payload`): a bench
of clock, reset and cocotbext-axi models on a block's ``s_axis_i`` and ``m_axis_o`` with the run's
idle and backpressure (its :class:`sw.config.BenchConfig`'s ``stall`` and ``seed``:
:func:`tb.runner.bench_config`)."""

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource

from tb.runner import bench_config
from tb.stalls import random_pauses

CLOCK_NS = 10


def plant_index(spec):
    """``"3:1:0:7"`` -> ``(3, 1, 0, 7)``."""
    return tuple(int(i) for i in spec.split(":"))


def stall_settings() -> tuple[float, int]:
    """``(p, seed)`` of the run's idle and backpressure."""
    bench = bench_config()
    return bench.stall, bench.seed


def stream_model(cls, dut, prefix, stall_seed=None):
    """A cocotbext-axi source or sink on ``prefix``, one list element per beat, quiet, with the
    run's pauses when ``stall_seed`` is given."""
    bus = AxiStreamBus.from_prefix(dut, prefix)
    model = cls(bus, dut.clk, dut.rst, byte_size=len(bus.tdata))
    model.log.setLevel("WARNING")
    p, seed = stall_settings()
    if p and stall_seed is not None:
        model.set_pause_generator(random_pauses(seed + stall_seed, p))
    return model


class Bench:
    """Clock, the source on ``s_axis_i`` (idle cycles) and the sink on ``m_axis_o`` (backpressure)."""

    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = stream_model(AxiStreamSource, dut, "s_axis_i", stall_seed=0)
        self.sink = stream_model(AxiStreamSink, dut, "m_axis_o", stall_seed=7)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)


def weight_frames(w, mult, shift, ni, no, f_w):
    """The blocks of ``x @ w`` [d_in, d_out], ``no`` outputs each, as frames of ``d_in / ni`` beats of
    :func:`hw.step.row_runs.weight_layout` (``f_w``: its :func:`fields`), each block's constants on
    every beat."""
    (w_off, _, _), (m_off, m_w, _), (s_off, s_w, _) = f_w["w.0"], f_w["mult.0"], f_w["shift.0"]
    frames = []
    for j in range(w.shape[1] // no):
        cols = w[:, j * no:(j + 1) * no].astype(np.int8)
        beats = []
        for k in range(w.shape[0] // ni):
            block = np.ascontiguousarray(cols[k * ni:(k + 1) * ni].T)          # [no, ni]: w[n * ni + k]
            word = int.from_bytes(block.tobytes(), "little") << w_off
            for n in range(no):
                word |= int(mult[j * no + n]) << (m_off + m_w * n)
                word |= int(shift[j * no + n]) << (s_off + s_w * n)
            beats.append(word)
        frames.append(beats)
    return frames


def check_burst(a, n, burst, size, nb, max_burst):
    """One AXI4 burst of ``n`` beats at ``a``: incrementing, ``nb`` bytes a beat, at most ``max_burst``
    beats, never across a 4 KB boundary."""
    from hw.lib.axi import BOUNDARY_BYTES

    assert burst == 1, f"burst at {a:#x}: type {burst}, not INCR"
    assert size == nb.bit_length() - 1, f"burst at {a:#x}: size {size}, not {nb} bytes a beat"
    assert n <= max_burst, f"burst of {n} words at {a:#x}: more than {max_burst}"
    assert a // BOUNDARY_BYTES == (a + n * nb - 1) // BOUNDARY_BYTES, \
        f"burst of {n} words at {a:#x} crosses a 4 KB boundary"


async def burst_monitor(dut, ch, nb, max_burst, bursts, prefix="m_axi"):
    """Checks every burst address an AXI4 manager gives on channel ``ch`` (``"ar"`` or ``"aw"`` of
    ``prefix``) with :func:`check_burst`; appends ``(addr, words)`` to ``bursts``. A coroutine that
    samples the channel every cycle; :func:`tap_bursts` does the same at no cost per cycle where a
    cocotbext-axi slave takes the channel."""
    sig = {n: getattr(dut, f"{prefix}_{ch}{n}") for n in ("valid", "ready", "addr", "len", "burst", "size")}
    while True:
        await RisingEdge(dut.clk)
        if sig["valid"].value and sig["ready"].value:
            a, n = int(sig["addr"].value), int(sig["len"].value) + 1
            check_burst(a, n, int(sig["burst"].value), int(sig["size"].value), nb, max_burst)
            bursts.append((a, n))


def tap_bursts(sink, ch, nb, max_burst, bursts):
    """As :func:`burst_monitor`, on a cocotbext-axi slave's address channel ``sink`` (an ``AxiRam``'s
    ``read_if.ar_channel`` or ``write_if.aw_channel``; ``ch``: ``"ar"`` or ``"aw"``): each burst is
    checked and recorded as the sink takes it, in the clock edge of its handshake."""
    put = sink.queue.put_nowait

    def taken(obj):
        a, n = int(getattr(obj, f"{ch}addr")), int(getattr(obj, f"{ch}len")) + 1
        check_burst(a, n, int(getattr(obj, f"{ch}burst")), int(getattr(obj, f"{ch}size")), nb, max_burst)
        bursts.append((a, n))
        put(obj)

    sink.queue.put_nowait = taken
