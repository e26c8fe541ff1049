"""Reducer: adds the int32 partial sums of a row's hidden chunks and requantises the total."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.mlp_core import partial_layout
from hw.accel.requant import Requant, load_layout
from hw.accel.row_assembler import RowAssembler
from hw.lib.widths import index_bits, mul_const
from sw.config import TileConfig
from sw.golden import quant

__all__ = ["Reducer", "row_out_layout"]


def row_out_layout(d_model, tag_bits):
    return data.StructLayout({"y": data.ArrayLayout(signed(8), d_model), "tag": tag_bits})


class Reducer(wiring.Component):
    """``y[tag] = requant(sum over chunks of z_chunk[tag])``, one output row per ``chunks`` partials.

    Partial slices (:func:`hw.accel.mlp_core.partial_layout`) arrive one chunk at a time (a
    :class:`hw.lib.packet_arbiter.PacketArbiter` merges the cores), in slice order within a chunk, and
    chunks of different rows may interleave. Per row (``tag``) a counter says how many chunks
    have been added; the sums live in a ``tags * n_tiles`` memory of ``cols`` int32 lanes. A
    slice of the first chunk is written as it is, later ones are added (read, add, write: two
    stages, with forwarding when consecutive slices hit the same entry), and the slices of the
    last chunk go to the requantiser (table entry ``layer * n_tiles + nt``) instead of back to
    memory. The row leaves through a :class:`hw.accel.row_assembler.RowAssembler` with its tag.

    The int32 sum cannot overflow: it is the same sum that :func:`sw.golden.quant.check_accumulator`
    bounds for ``K = d_ff``.

    Parameters
    ----------
    d_model, cols : int
        Output row length and lanes per slice.
    layers, chunks : int
    tags : int
        Rows that can be in progress at once (the batch).

    Members
    -------
    i : In(stream.Signature(partial_layout(cols, d_model // cols, layers, index_bits(tags))))
    o : Out(stream.Signature(row_out_layout(d_model, index_bits(tags))))
    rq : In(stream.Signature(load_layout(cols, layers * n_tiles), always_ready=True))
    """

    def __init__(self, d_model, cols, *, layers, chunks, tags):
        if d_model % cols:
            raise ValueError(f"Reducer: d_model={d_model} is not a multiple of cols={cols}")
        self._d, self._cols, self._layers, self._chunks, self._tags = d_model, cols, layers, chunks, tags
        self._nt = d_model // cols
        tb = index_bits(tags)
        super().__init__({
            "i": In(stream.Signature(partial_layout(cols, self._nt, layers, tb))),
            "o": Out(stream.Signature(row_out_layout(d_model, tb))),
            "rq": In(stream.Signature(load_layout(cols, layers * self._nt), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        C, NT, S = self._cols, self._nt, self._chunks
        lanes = data.ArrayLayout(signed(quant.ACC_BITS), C)
        m.submodules.requant = requant = Requant(C, self._layers * NT)
        wiring.connect(m, wiring.flipped(self.rq), requant.params)
        m.submodules.asm = asm = RowAssembler(TileConfig(rows=1, cols=C, k_dim=1, n_dim=self._d),
                                              sel_bits=len(requant.o.p.sel))
        m.submodules.tags = tagq = fifo.SyncFIFOBuffered(width=len(self.o.p.tag), depth=4)
        m.submodules.sums = sums = memory.Memory(shape=lanes, depth=self._tags * NT, init=[],
                                                 attrs={"ram_style": "distributed"})
        wr = sums.write_port()
        rd = sums.read_port(domain="sync")

        count = Array(Signal(range(max(2, S)), name=f"count_{t}") for t in range(self._tags))
        en = Signal()
        m.d.comb += [en.eq(requant.i.ready & tagq.w_rdy), self.i.ready.eq(en)]
        take = self.i.valid & en
        addr = Signal(range(self._tags * NT))
        m.d.comb += [addr.eq(mul_const(self.i.p.tag, NT) + self.i.p.nt), rd.addr.eq(addr), rd.en.eq(en)]

        # Stage 1: the slice, its flags and the address; the memory read is under way.
        s1 = Signal(data.StructLayout({
            "valid": 1, "acc": lanes, "nt": len(self.i.p.nt), "tag": len(self.i.p.tag),
            "layer": len(self.i.p.layer), "first": 1, "final": 1, "addr": len(addr), "fwd": 1}))
        fwd_data = Signal(lanes)
        cnt = count[self.i.p.tag]
        # Stage 2 (combinational from s1): the new sum.
        old = Signal(lanes)
        new = Signal(lanes)
        m.d.comb += old.eq(Mux(s1.fwd, fwd_data, rd.data))
        for c in range(C):
            m.d.comb += new[c].eq(Mux(s1.first, 0, old[c]) + s1.acc[c])
        writing = s1.valid & ~s1.final & en
        m.d.comb += [wr.en.eq(writing), wr.addr.eq(s1.addr), wr.data.eq(new)]
        with m.If(en):
            m.d.sync += [
                s1.valid.eq(take), s1.acc.eq(self.i.p.acc), s1.nt.eq(self.i.p.nt),
                s1.tag.eq(self.i.p.tag), s1.layer.eq(self.i.p.layer), s1.addr.eq(addr),
                s1.first.eq(cnt == 0), s1.final.eq(cnt == S - 1),
                s1.fwd.eq(writing & (s1.addr == addr)), fwd_data.eq(new),
            ]
            with m.If(take & self.i.p.last):
                m.d.sync += cnt.eq(Mux(cnt == S - 1, 0, cnt + 1))
        final = s1.valid & s1.final
        m.d.comb += [
            requant.i.valid.eq(final),
            requant.i.p.acc.eq(new),
            requant.i.p.sel.eq(mul_const(s1.layer, NT) + s1.nt),
            tagq.w_en.eq(final & en & (s1.nt == 0)),
            tagq.w_data.eq(s1.tag),
        ]
        wiring.connect(m, requant.o, asm.i)
        m.d.comb += [
            self.o.valid.eq(asm.o.valid),
            self.o.p.y.eq(asm.o.p),
            self.o.p.tag.eq(tagq.r_data),
            asm.o.ready.eq(self.o.ready),
            tagq.r_en.eq(self.o.valid & self.o.ready),
        ]
        return m
