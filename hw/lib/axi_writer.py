"""Streams regions of memory (the KV cache's new keys and values) out over AXI4."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.lib.axi import BURST_INCR, AxiWriteSignature, burst_words
from hw.lib.axi_reader import read_command_layout

__all__ = ["AxiWriter", "write_done_layout", "write_word_layout"]


def write_word_layout(data_width):
    """A data word to write (a region's words in order)."""
    return data.StructLayout({"data": data_width})


def write_done_layout():
    """A region written: all its bursts answered; ``error`` if any answer was not OKAY."""
    return data.StructLayout({"error": 1})


class AxiWriter(wiring.Component):
    """An AXI4 write manager: each region taken on ``i`` is written with the next words of ``w``,
    and reported on ``o`` once every one of its bursts is answered.

    The region is cut into incrementing bursts by the read manager's rule
    (:func:`hw.lib.axi.burst_words`: at most ``max_burst`` words, never across 4 KB). A burst's
    address goes out as soon as its length is known (up to ``queue`` bursts ahead of their data);
    its words follow on the W channel from ``w``, every byte strobed, ``wlast`` on the burst's last.
    ``bready`` is high while ``o`` can take a report, so a region's report is never lost.

    Parameters
    ----------
    addr_width, data_width : int
        The bus's; ``data_width`` a power of two of at least 8.
    max_burst : int
        Words of the longest burst (1-256).
    count_bits : int
        Width of a region's word count.
    queue : int
        Bursts whose address has gone out and whose data or answer is still due.

    Members
    -------
    i : In(stream.Signature(read_command_layout(addr_width, count_bits)))
        Regions to write (``words`` at least 1).
    w : In(stream.Signature(write_word_layout(data_width)))
    o : Out(stream.Signature(write_done_layout()))
    m_axi : Out(AxiWriteSignature(addr_width, data_width))
    error : Out(1)
        Set (and held) on any answer other than OKAY.
    """

    def __init__(self, addr_width=32, data_width=64, *, max_burst=16, count_bits=24, queue=4):
        for name, v in (("addr_width", addr_width), ("data_width", data_width), ("max_burst", max_burst),
                        ("count_bits", count_bits), ("queue", queue)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"AxiWriter {name} must be a positive integer, not {v!r}")
        if data_width < 8 or data_width & (data_width - 1):
            raise ValueError(f"AxiWriter data_width must be a power of two of at least 8, not {data_width}")
        if max_burst > 256:
            raise ValueError(f"AxiWriter max_burst must be at most 256 (AXI4), not {max_burst}")
        self._aw, self._dw, self._burst, self._queue = addr_width, data_width, max_burst, max(2, queue)
        super().__init__({
            "i": In(stream.Signature(read_command_layout(addr_width, count_bits))),
            "w": In(stream.Signature(write_word_layout(data_width))),
            "o": Out(stream.Signature(write_done_layout())),
            "m_axi": Out(AxiWriteSignature(addr_width, data_width)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.m_axi
        size = exact_log2(self._dw // 8)
        MB = self._burst

        # ---- the region being cut into bursts -------------------------------------------------------
        addr = Signal(self._aw)
        left = Signal.like(self.i.p.words)
        active = Signal()
        m.d.comb += self.i.ready.eq(~active)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [addr.eq(self.i.p.addr), left.eq(self.i.p.words), active.eq(self.i.p.words != 0)]
        n = burst_words(m, addr, left, max_burst=MB, size=size)

        # Per burst whose address has gone out: its length (for the W channel) and whether it is the
        # region's last (for the report).
        m.submodules.lens = lens = fifo.SyncFIFOBuffered(width=len(n), depth=self._queue)
        m.submodules.finals = finals = fifo.SyncFIFOBuffered(width=1, depth=self._queue)
        aw_fire = Signal()
        final = Signal()
        m.d.comb += [final.eq(left == n),
                     bus.awvalid.eq(active & lens.w_rdy & finals.w_rdy),
                     bus.awaddr.eq(addr), bus.awlen.eq(n - 1), bus.awsize.eq(size),
                     bus.awburst.eq(BURST_INCR), bus.awid.eq(0),
                     aw_fire.eq(bus.awvalid & bus.awready),
                     lens.w_en.eq(aw_fire), lens.w_data.eq(n),
                     finals.w_en.eq(aw_fire), finals.w_data.eq(final)]
        with m.If(aw_fire):
            m.d.sync += [addr.eq(addr + (n << size)), left.eq(left - n)]
            with m.If(final):
                m.d.sync += active.eq(0)

        # ---- the data: the bursts' words in order ------------------------------------------------------
        beat = Signal(range(MB))
        w_last = Signal()
        m.d.comb += [w_last.eq(beat == lens.r_data - 1),
                     bus.wvalid.eq(lens.r_rdy & self.w.valid), bus.wdata.eq(self.w.p.data),
                     bus.wstrb.eq(-1), bus.wlast.eq(w_last),
                     self.w.ready.eq(lens.r_rdy & bus.wready),
                     lens.r_en.eq(bus.wvalid & bus.wready & w_last)]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += beat.eq(Mux(w_last, 0, beat + 1))

        # ---- the answers: a region's report after its last burst's ---------------------------------
        bad = Signal()                                 # an answer of this region was not OKAY
        m.d.comb += [bus.bready.eq(finals.r_rdy & (~self.o.valid | self.o.ready)),
                     finals.r_en.eq(bus.bvalid & bus.bready)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(bus.bvalid & bus.bready):
            err = bus.bresp != 0
            with m.If(err):
                m.d.sync += self.error.eq(1)
            with m.If(finals.r_data):
                m.d.sync += [self.o.valid.eq(1), self.o.p.error.eq(bad | err), bad.eq(0)]
            with m.Else():
                m.d.sync += bad.eq(bad | err)
        return m
