"""Streams regions of memory (weights, the KV cache) in over AXI4, with a prefetch buffer."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.lib.axi import BURST_INCR, AxiReadSignature, burst_words

__all__ = ["AxiReader", "read_command_layout", "read_word_layout"]


def read_command_layout(addr_width, count_bits):
    """A region: its byte address (aligned to the data width) and its length in data words."""
    return data.StructLayout({"addr": addr_width, "words": count_bits})


def read_word_layout(data_width):
    """A data word; ``last`` on a region's last."""
    return data.StructLayout({"data": data_width, "last": 1})


class AxiReader(wiring.Component):
    """An AXI4 read manager: each region taken on ``i`` leaves on ``o``, word by word, in order.

    The region is cut into incrementing bursts of at most ``max_burst`` words that do not cross a
    4 KB boundary. A burst is requested only when the prefetch buffer (``depth`` words) has room
    for all of it beside the words already requested, so ``rready`` is high from the cycle after
    the burst's address (the earliest a memory may answer, where it waits one cycle) and the
    memory's latency is hidden as long as the consumer is slower than the buffer is deep. Every
    response is checked: ``error`` is set (and held) on a response other than OKAY.

    Parameters
    ----------
    addr_width, data_width : int
        The bus's; ``data_width`` a power of two of at least 8.
    max_burst : int
        Words of the longest burst (1-256).
    depth : int
        Words of the prefetch buffer (at least ``max_burst``).
    count_bits : int
        Width of a region's word count.

    Members
    -------
    i : In(stream.Signature(read_command_layout(addr_width, count_bits)))
        Regions to read (``words`` at least 1).
    o : Out(stream.Signature(read_word_layout(data_width)))
    m_axi : Out(AxiReadSignature(addr_width, data_width))
    error : Out(1)
    """

    def __init__(self, addr_width=32, data_width=64, *, max_burst=16, depth=64, count_bits=24):
        for name, v in (("addr_width", addr_width), ("data_width", data_width), ("max_burst", max_burst),
                        ("depth", depth), ("count_bits", count_bits)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"AxiReader {name} must be a positive integer, not {v!r}")
        if data_width < 8 or data_width & (data_width - 1):
            raise ValueError(f"AxiReader data_width must be a power of two of at least 8, not {data_width}")
        if max_burst > 256:
            raise ValueError(f"AxiReader max_burst must be at most 256 (AXI4), not {max_burst}")
        if depth < max_burst:
            raise ValueError(f"AxiReader depth ({depth}) must hold a burst of max_burst ({max_burst})")
        self._aw, self._dw, self._cb = addr_width, data_width, count_bits
        self._burst, self._depth = max_burst, depth
        super().__init__({
            "i": In(stream.Signature(read_command_layout(addr_width, count_bits))),
            "o": Out(stream.Signature(read_word_layout(data_width))),
            "m_axi": Out(AxiReadSignature(addr_width, data_width)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.m_axi
        nbytes = self._dw // 8
        size = exact_log2(nbytes)
        D, MB = self._depth, self._burst

        # ---- the region being requested ---------------------------------------------------------
        addr = Signal(self._aw)
        left = Signal(self._cb)
        active = Signal()
        m.d.comb += self.i.ready.eq(~active)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [addr.eq(self.i.p.addr), left.eq(self.i.p.words), active.eq(self.i.p.words != 0)]

        n = burst_words(m, addr, left, max_burst=MB, size=size)

        # ---- room: words requested and not yet taken on o ---------------------------------------------
        owed = Signal(range(D + 1))
        bursts = fifo.SyncFIFOBuffered(width=1, depth=max(2, D))        # per burst: the region's last?
        m.submodules.bursts = bursts
        ar_fire = Signal()
        final = Signal()
        m.d.comb += [final.eq(left == n),
                     bus.arvalid.eq(active & (owed + n <= D) & bursts.w_rdy),
                     bus.araddr.eq(addr), bus.arlen.eq(n - 1), bus.arsize.eq(size),
                     bus.arburst.eq(BURST_INCR), bus.arid.eq(0),
                     ar_fire.eq(bus.arvalid & bus.arready),
                     bursts.w_en.eq(ar_fire), bursts.w_data.eq(final)]
        with m.If(ar_fire):
            m.d.sync += [addr.eq(addr + (n << size)), left.eq(left - n)]
            with m.If(final):
                m.d.sync += active.eq(0)

        # ---- responses into the prefetch buffer ----------------------------------------------------
        m.submodules.buf = buf = fifo.SyncFIFOBuffered(width=self._dw + 1, depth=D)
        word = Signal(read_word_layout(self._dw))
        r_fire = Signal()
        # rready waits only for the burst's own record (a memory may answer the cycle after the
        # address; the record's queue shows it a cycle later).
        m.d.comb += [bus.rready.eq(bursts.r_rdy), r_fire.eq(bus.rvalid & bus.rready),
                     word.data.eq(bus.rdata), word.last.eq(bus.rlast & bursts.r_data),
                     buf.w_en.eq(r_fire), buf.w_data.eq(word),
                     bursts.r_en.eq(r_fire & bus.rlast)]
        with m.If(r_fire & (bus.rresp != 0)):
            m.d.sync += self.error.eq(1)

        o_fire = Signal()
        m.d.comb += [self.o.valid.eq(buf.r_rdy), self.o.payload.eq(buf.r_data), buf.r_en.eq(self.o.ready),
                     o_fire.eq(self.o.valid & self.o.ready)]
        m.d.sync += owed.eq(owed + Mux(ar_fire, n, 0) - o_fire)
        return m
