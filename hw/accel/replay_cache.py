"""Replay cache: the MLP output used at (frame t-1, position i), per layer and row."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.bram import Bram, widest_data_width
from hw.lib.widths import index_bits, mul_const

__all__ = ["ReplayCache", "request_layout", "read_layout"]


def request_layout(dim, layers, tokens_per_frame, batch):
    """A cache request: ``write`` stores ``y`` for (layer, index, row); otherwise a read of it."""
    return data.StructLayout({
        "write": 1,
        "layer": index_bits(layers),
        "index": index_bits(tokens_per_frame),
        "row": index_bits(batch),
        "y": data.ArrayLayout(signed(8), dim),
    })


def read_layout(dim, batch):
    """A read's answer: the entry ``y`` and the ``row`` of the request."""
    return data.StructLayout({"y": data.ArrayLayout(signed(8), dim), "row": index_bits(batch)})


class ReplayCache(wiring.Component):
    """``layers * tokens_per_frame * batch`` int8 vectors of ``dim``: ``N x B x d`` bytes per layer.

    A computed row is written back (``write = 1``); a replayed row reads the entry, which holds the
    output that was *used* one frame earlier at the same position, fresh or itself replayed
    (chaining: replayed rows are not written). Reads return on ``o`` in request order, with the
    request's ``row``, :attr:`latency` cycles after the request is taken when ``o`` does not wait;
    a read of an entry written by an earlier request sees the written value.

    The entries are block RAMs read through their output registers (:class:`hw.lib.bram.Bram`,
    as wide as their depth allows, side by side). A request is first registered (its address,
    row and kind, and its ``y``), so that no handshake or address logic in front of the cache
    reaches the block RAMs spread over the die. The request register, the read stage and the
    output register form a three-stage pipeline that advances while ``o`` is empty or taken (one
    enable, ``i.ready``), one request per cycle. A write goes to the block RAMs in the cycle
    after it is taken, whether or not the pipeline advances (its ``y`` is registered without an
    enable, so that the 8 * ``dim`` data flops have none).
    A write does not read (the block RAM's ports must not collide on one address).

    Parameters
    ----------
    dim : int
        ``d_model``.
    layers, tokens_per_frame, batch : int
        Geometry of the cache.

    Members
    -------
    i : In(stream.Signature(request_layout(...)))
    o : Out(stream.Signature(read_layout(dim, batch)))
        Read data and the row they answer.
    o_valid_next : Out(1)
        ``o.valid`` of the next cycle (so that a consumer can keep copies of it in registers).
    """

    #: Cycles from a read request taken to its data on ``o`` (the request register, the block
    #: RAM's address and output registers).
    latency = Bram.latency + 1

    def __init__(self, dim, layers, tokens_per_frame, batch):
        self._dim, self._layers, self._n, self._batch = dim, layers, tokens_per_frame, batch
        self._bank_width = widest_data_width(max(2, self.depth))
        if self._bank_width is None:
            raise ValueError(f"ReplayCache: {self.depth} entries do not fit one block RAM's depth")
        super().__init__({
            "i": In(stream.Signature(request_layout(dim, layers, tokens_per_frame, batch))),
            "o": Out(stream.Signature(read_layout(dim, batch))),
            "o_valid_next": Out(1),
        })

    @property
    def depth(self):
        return self._layers * self._n * self._batch

    def entry(self, layer: int, index: int, row: int) -> int:
        """The entry of (``layer``, ``index``, ``row``): the address ``elaborate`` computes."""
        return (layer * self._n + index) * self._batch + row

    @property
    def bank_slices(self) -> list[tuple[int, int]]:
        """``(lo, width)`` of the bits of an entry's ``y`` (``8 * dim``, element ``e`` in bits
        ``8 e`` to ``8 e + 7``) that block RAM ``bank_<n>`` holds, for each ``n``."""
        bits = 8 * self._dim
        return [(lo, min(self._bank_width, bits - lo)) for lo in range(0, bits, self._bank_width)]

    def elaborate(self, platform):
        m = Module()
        p = self.i.p
        en = Signal()
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        # The request register: address, row and kind advance with the pipeline; a write's data
        # and its one-cycle write enable are registered without an enable.
        req_valid, req_write = Signal(name="req_valid"), Signal(name="req_write")
        req_addr = Signal(range(self.depth), name="req_addr")
        req_row = Signal.like(p.row, name="req_row")
        req_y = Signal(8 * self._dim, name="req_y", reset_less=True)
        w_go = Signal(name="w_go")
        addr = Signal(range(self.depth))                # the address of the request on ``i``
        m.d.comb += addr.eq(mul_const(mul_const(p.layer, self._n) + p.index, self._batch) + p.row)
        with m.If(en):
            m.d.sync += [req_valid.eq(self.i.valid), req_write.eq(p.write), req_row.eq(p.row),
                         req_addr.eq(addr)]
        m.d.sync += [req_y.eq(p.y), w_go.eq(self.i.valid & en & p.write)]
        y_out = Value.cast(self.o.p.y)
        for n, (lo, w) in enumerate(self.bank_slices):
            bank = m.submodules[f"bank_{n}"] = Bram(w, max(2, self.depth))
            m.d.comb += [
                bank.w_en.eq(w_go), bank.w_addr.eq(req_addr), bank.w_data.eq(req_y[lo:lo + w]),
                bank.r_en.eq(en & ~(req_valid & req_write)), bank.r_ce_out.eq(en), bank.r_addr.eq(req_addr),
                y_out[lo:lo + w].eq(bank.r_data),
            ]
        # The read stage's valid and row, then the output register's (o).
        stage_valid, stage_row = Signal(), Signal.like(p.row)
        m.d.comb += self.o_valid_next.eq(Mux(en, stage_valid, self.o.valid))
        with m.If(en):
            m.d.sync += [stage_valid.eq(req_valid & ~req_write), stage_row.eq(req_row),
                         self.o.valid.eq(stage_valid), self.o.p.row.eq(stage_row)]
        return m
