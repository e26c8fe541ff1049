"""Replay cache: the MLP output used at (frame t-1, position i), per layer and row."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.widths import index_bits, mul_const

__all__ = ["ReplayCache", "request_layout"]



def request_layout(dim, layers, tokens_per_frame, batch):
    """A cache request: ``write`` stores ``y`` for (layer, index, row); otherwise a read of it."""
    return data.StructLayout({
        "write": 1,
        "layer": index_bits(layers),
        "index": index_bits(tokens_per_frame),
        "row": index_bits(batch),
        "y": data.ArrayLayout(signed(8), dim),
    })


class ReplayCache(wiring.Component):
    """``layers * tokens_per_frame * batch`` int8 vectors of ``dim``: ``N x B x d`` bytes per layer.

    A computed row is written back (``write = 1``); a replayed row reads the entry, which holds the
    output that was *used* one frame earlier at the same position, fresh or itself replayed
    (chaining: replayed rows are not written). Reads return on ``o`` in request order, one cycle
    later; a read of an entry written by an earlier request sees the written value.

    Parameters
    ----------
    dim : int
        ``d_model``.
    layers, tokens_per_frame, batch : int
        Geometry of the cache.

    Members
    -------
    i : In(stream.Signature(request_layout(...)))
    o : Out(stream.Signature(ArrayLayout(signed(8), dim)))
        Read data.
    """

    def __init__(self, dim, layers, tokens_per_frame, batch):
        self._dim, self._layers, self._n, self._batch = dim, layers, tokens_per_frame, batch
        super().__init__({
            "i": In(stream.Signature(request_layout(dim, layers, tokens_per_frame, batch))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), dim))),
        })

    @property
    def depth(self):
        return self._layers * self._n * self._batch

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=data.ArrayLayout(signed(8), self._dim),
                                               depth=self.depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(domain="sync")
        p = self.i.p
        addr = Signal(range(self.depth))
        en = Signal()
        m.d.comb += [
            addr.eq(mul_const(mul_const(p.layer, self._n) + p.index, self._batch) + p.row),
            en.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(en),
            wr.en.eq(self.i.valid & en & p.write), wr.addr.eq(addr), wr.data.eq(p.y),
            rd.en.eq(en), rd.addr.eq(addr),
            self.o.p.eq(rd.data),
        ]
        with m.If(en):
            m.d.sync += self.o.valid.eq(self.i.valid & ~p.write)
        return m
