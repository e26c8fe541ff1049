"""What a decode step reads from and writes to memory: the token embeddings and the KV cache, over AXI4."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.lib.axi import AxiReadSignature, AxiWriteSignature
from hw.lib.axi_reader import AxiReader
from hw.lib.axi_writer import AxiWriter
from hw.lib.widths import index_bits
from hw.step.attention_layer import kv_layout
from hw.step.channel_join import row_layout
from hw.step.residual import R_BITS

__all__ = ["StepMemory", "step_command_layout", "history_layout", "kv_entry_words"]

_EMB, _SPATIAL, _HIST = 0, 1, 2


def step_command_layout(batch, vocab, positions, tokens_per_frame):
    """A decode step: its position, the position's index in its frame, whether the spatial
    embedding is added (an image token's step), whether FastCar marks the position one frame
    earlier (a step of frame 1 or later), and each row's token."""
    return data.StructLayout({"pos": index_bits(positions), "index": index_bits(tokens_per_frame),
                              "spatial": 1, "replaying": 1,
                              "token": data.ArrayLayout(index_bits(vocab), batch)})


def history_layout(positions):
    """A step's layer: how many earlier positions each head attends."""
    return data.StructLayout({"history": range(positions)})


def kv_entry_words(head_dim, data_width):
    """Data words of one position's key and value of one head in memory (``k`` then ``v``, a byte
    each, little-endian, the last word padded)."""
    return -(-2 * head_dim * 8 // data_width)


class StepMemory(wiring.Component):
    """The memory traffic of decode steps, over one AXI4 read manager
    (:class:`hw.lib.axi_reader.AxiReader`) and one write manager
    (:class:`hw.lib.axi_writer.AxiWriter`).

    Per step taken on ``i``, in order:

    - each row's embedding ``emb[token]`` (int32, ``d_model`` a row at ``emb_base``), plus
      ``spatial[index]`` (at ``spatial_base``) for an image token, out on ``emb``;
    - once every key and value of the earlier steps is written (their writes answered), for each
      layer, row and head, the earlier positions attended, out on ``kv``: all of them, or with
      ``window`` > 0 the ``sinks`` first and those less than ``window`` back (the model's
      :func:`sw.model.fastcar.attention_mask`); each marked ``tas`` if it is the position
      ``tokens_per_frame`` back and the step is ``replaying``. Each layer's count leaves on ``n``
      first.

    Each new key and value taken on ``kv_in`` (per step, layer by layer, row by row, head by head)
    is written to its place. The KV cache at ``kv_base``: for each layer, row and head, ``positions``
    entries of :func:`kv_entry_words` words. Embedding rows need ``d_model * 4`` to be a multiple of
    the data width's bytes, and the sum to fit 32 bits (it wraps, as the golden model's int32
    ``r_in`` does).

    Parameters
    ----------
    d_model, layers, batch, heads, vocab, tokens_per_frame, positions : int
        The model's; ``positions`` is the most positions a step attends and the cache holds.
    addr_width, data_width, max_burst, depth : int
        The AXI4 bus and the read manager's prefetch buffer.

    Members
    -------
    i : In(stream.Signature(step_command_layout(...)))
    emb : Out(stream.Signature(channel_join.row_layout()))
    n : Out(stream.Signature(history_layout(positions)))
    kv : Out(stream.Signature(attention_layer.kv_layout(head_dim)))
    kv_in : In(stream.Signature(attention_layer.kv_layout(head_dim)))
    sinks, window : In
        The sparse pattern (``window`` 0: dense, causal), static while steps run.
    emb_base, spatial_base, kv_base : In(addr_width)
        Byte addresses, aligned to the data width.
    rd : Out(AxiReadSignature(addr_width, data_width))
    wr : Out(AxiWriteSignature(addr_width, data_width))
    error : Out(1)
        Set (and held) on an answer other than OKAY.
    """

    def __init__(self, d_model, layers, batch, heads, vocab, tokens_per_frame, positions, *, addr_width=32,
                 data_width=64, max_burst=16, depth=64):
        for name, v in (("d_model", d_model), ("layers", layers), ("batch", batch), ("heads", heads),
                        ("vocab", vocab), ("tokens_per_frame", tokens_per_frame), ("positions", positions),
                        ("data_width", data_width)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"StepMemory {name} must be a positive integer, not {v!r}")
        if data_width < 32 or (d_model * 32) % data_width:
            raise ValueError(f"StepMemory data_width ({data_width}) must be at least 32 and divide an "
                             f"embedding row ({d_model} x 32 bits)")
        if d_model % heads:
            raise ValueError(f"StepMemory heads ({heads}) must divide d_model ({d_model})")
        self._d, self._l, self._b, self._h = d_model, layers, batch, heads
        self._v, self._n, self._p = vocab, tokens_per_frame, positions
        self._dh = d_model // heads
        self._aw, self._dw = addr_width, data_width
        count_bits = ceil_log2(positions * kv_entry_words(self._dh, data_width) + 1) + 1
        self._reader = AxiReader(addr_width, data_width, max_burst=max_burst, depth=depth,
                                 count_bits=count_bits)
        self._writer = AxiWriter(addr_width, data_width, max_burst=max_burst, count_bits=count_bits)
        super().__init__({
            "i": In(stream.Signature(step_command_layout(batch, vocab, positions, tokens_per_frame))),
            "emb": Out(stream.Signature(row_layout())),
            "n": Out(stream.Signature(history_layout(positions))),
            "kv": Out(stream.Signature(kv_layout(self._dh))),
            "kv_in": In(stream.Signature(kv_layout(self._dh))),
            "sinks": In(range(positions + 1)), "window": In(range(positions + 1)),
            "emb_base": In(addr_width), "spatial_base": In(addr_width), "kv_base": In(addr_width),
            "rd": Out(AxiReadSignature(addr_width, data_width)),
            "wr": Out(AxiWriteSignature(addr_width, data_width)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, L, B, H, N, P, DH = self._d, self._l, self._b, self._h, self._n, self._p, self._dh
        nb = self._dw // 8
        EW = kv_entry_words(DH, self._dw)
        STRIDE = EW * nb                           # bytes of an entry
        LBH = P * STRIDE                           # bytes of a layer's row's head
        ROW_WORDS = D * 4 // nb
        m.submodules.reader = rdr = self._reader
        m.submodules.writer = wtr = self._writer
        wiring.connect(m, rdr.m_axi, wiring.flipped(self.rd))
        wiring.connect(m, wtr.m_axi, wiring.flipped(self.wr))
        m.d.comb += self.error.eq(rdr.error | wtr.error)

        # The position of each step whose keys and values are still to be written.
        m.submodules.wpos = wpos = fifo.SyncFIFOBuffered(width=len(self.i.p.pos), depth=4)
        cmd = Signal.like(self.i.p)
        m.d.comb += [wpos.w_data.eq(self.i.p.pos)]

        # ---- the read sequencer -------------------------------------------------------------------
        # Per region read: what it is and, for the history, its first position.
        kind_l = data.StructLayout({"kind": 2, "spatial_next": 1, "first": range(P), "mark": range(P + 1)})
        m.submodules.kinds = kinds = fifo.SyncFIFOBuffered(width=kind_l.size, depth=8)
        m.submodules.counts = counts = fifo.SyncFIFOBuffered(width=history_layout(P).size, depth=max(2, L))
        m.d.comb += [self.n.valid.eq(counts.r_rdy), self.n.payload.eq(counts.r_data),
                     counts.r_en.eq(self.n.ready)]

        p = cmd.pos
        # The attended earlier positions: [0, len_a) and [start_b, p).
        len_a, start_b, len_b = Signal(range(P + 1)), Signal(range(P + 1)), Signal(range(P + 1))
        lo = Signal(signed(len(p) + 2))
        with m.If(self.window == 0):
            m.d.comb += [len_a.eq(p), start_b.eq(p)]
        with m.Else():
            m.d.comb += [len_a.eq(Mux(self.sinks < p, self.sinks, p)), lo.eq(p + 1 - self.window),
                         start_b.eq(Mux(lo > self.sinks, lo, self.sinks))]
        m.d.comb += len_b.eq(Mux(start_b < p, p - start_b, 0))
        mark = Signal(range(P + 1))                # the position one frame back, or P (none)
        m.d.comb += mark.eq(Mux(cmd.replaying & (p >= N), p - N, P))

        steps = Signal(32)                         # steps taken
        acked = Signal(32)                         # heads written and answered
        b_at, h_at, l_at = Signal(range(B)), Signal(range(H)), Signal(range(L))
        lbh = Signal(self._aw)                     # the address of the current layer's row's head
        kind_w = Signal(kind_l)
        c = rdr.i.p
        m.d.comb += [kinds.w_data.eq(kind_w), rdr.i.valid.eq(0)]
        fire = Signal()
        m.d.comb += fire.eq(rdr.i.valid & rdr.i.ready & kinds.w_rdy)

        def issue(addr, words, kind, **kw):
            m.d.comb += [rdr.i.valid.eq(kinds.w_rdy), c.addr.eq(addr), c.words.eq(words),
                         kind_w.kind.eq(kind), kinds.w_en.eq(fire)]
            for k, v in kw.items():
                m.d.comb += getattr(kind_w, k).eq(v)

        def next_head(then):
            with m.If(h_at == H - 1):
                m.d.sync += h_at.eq(0)
                with m.If(b_at == B - 1):
                    m.d.sync += b_at.eq(0)
                    with m.If(l_at == L - 1):
                        m.d.sync += l_at.eq(0)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += l_at.eq(l_at + 1)
                        m.next = "COUNT"
                with m.Else():
                    m.d.sync += b_at.eq(b_at + 1)
                    m.next = then
            with m.Else():
                m.d.sync += h_at.eq(h_at + 1)
                m.next = then

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.i.ready.eq(wpos.w_rdy), wpos.w_en.eq(self.i.valid & self.i.ready)]
                with m.If(self.i.valid & self.i.ready):
                    m.d.sync += [cmd.eq(self.i.p), steps.eq(steps + 1), b_at.eq(0), h_at.eq(0), l_at.eq(0)]
                    m.next = "EMB"
            with m.State("EMB"):
                issue(self.emb_base + cmd.token[b_at] * (D * 4), ROW_WORDS, _EMB, spatial_next=cmd.spatial)
                with m.If(fire):
                    with m.If(cmd.spatial):
                        m.next = "SPATIAL"
                    with m.Elif(b_at == B - 1):
                        m.d.sync += b_at.eq(0)
                        m.next = "WAIT"
                    with m.Else():
                        m.d.sync += b_at.eq(b_at + 1)
            with m.State("SPATIAL"):
                issue(self.spatial_base + cmd.index * (D * 4), ROW_WORDS, _SPATIAL)
                with m.If(fire):
                    with m.If(b_at == B - 1):
                        m.d.sync += b_at.eq(0)
                        m.next = "WAIT"
                    with m.Else():
                        m.d.sync += b_at.eq(b_at + 1)
                        m.next = "EMB"
            with m.State("WAIT"):
                # Every key and value of the earlier steps is in memory before any is read back.
                with m.If(acked >= (steps - 1) * (L * B * H)):
                    m.d.sync += lbh.eq(self.kv_base)
                    m.next = "COUNT"
            with m.State("COUNT"):
                m.d.comb += [counts.w_en.eq(1), counts.w_data.eq(len_a + len_b)]
                with m.If(counts.w_rdy):
                    m.next = "A"
            with m.State("A"):
                with m.If(len_a == 0):
                    m.next = "B"
                with m.Else():
                    issue(lbh, len_a * EW, _HIST, first=0, mark=mark)
                    with m.If(fire):
                        m.next = "B"
            with m.State("B"):
                with m.If(len_b == 0):
                    m.d.sync += lbh.eq(lbh + LBH)
                    next_head("A")
                with m.Else():
                    issue(lbh + start_b * STRIDE, len_b * EW, _HIST, first=start_b, mark=mark)
                    with m.If(fire):
                        m.d.sync += lbh.eq(lbh + LBH)
                        next_head("A")

        # ---- the words read: embedding rows, or keys and values ------------------------------------
        k = Signal(kind_l)
        m.d.comb += k.eq(kinds.r_data)
        word = rdr.o.p
        EPW = self._dw // 32                      # embedding elements a word
        sub = Signal(range(max(2, EPW)))
        m.submodules.ebuf = ebuf = memory.Memory(shape=signed(R_BITS), depth=D, init=[])
        ew, er = ebuf.write_port(), ebuf.read_port(domain="comb")
        col = Signal(range(D))
        elem = Signal(signed(R_BITS))
        m.d.comb += elem.eq(word.data.word_select(sub, 32))
        entry = Signal(EW * self._dw)
        got = Signal(range(EW + 1))
        pos = Signal(range(P + 1))
        first_word = Signal(init=1)               # the next word is its region's first
        kv_full, kv_tas = Signal(), Signal()
        m.d.comb += [er.addr.eq(col), ew.addr.eq(col), ew.data.eq(elem),
                     self.emb.p.data.r.eq(Mux(k.kind == _SPATIAL, elem + er.data, elem)),
                     self.emb.p.last.eq(col == D - 1)]
        with m.If(kinds.r_rdy & rdr.o.valid):
            with m.If(k.kind == _HIST):
                m.d.comb += rdr.o.ready.eq(~kv_full)
                this_pos = Mux(first_word, k.first, pos)
                with m.If(rdr.o.ready):
                    shifted = Cat(entry[self._dw:], word.data) if EW > 1 else word.data
                    m.d.sync += [entry.eq(shifted),
                                 got.eq(got + 1), first_word.eq(word.last)]
                    with m.If(first_word):
                        m.d.sync += pos.eq(k.first)
                    with m.If(got == EW - 1):
                        m.d.sync += [kv_full.eq(1), got.eq(0), pos.eq(this_pos + 1),
                                     kv_tas.eq(this_pos == k.mark)]
                    with m.If(word.last):
                        m.d.comb += kinds.r_en.eq(1)
            with m.Else():
                emit = (k.kind == _SPATIAL) | ~k.spatial_next
                last_sub = sub == EPW - 1
                with m.If(emit):
                    m.d.comb += self.emb.valid.eq(1)
                with m.Else():
                    m.d.comb += ew.en.eq(1)
                with m.If(~emit | self.emb.ready):
                    m.d.sync += [sub.eq(Mux(last_sub, 0, sub + 1)), col.eq(Mux(col == D - 1, 0, col + 1))]
                    m.d.comb += rdr.o.ready.eq(last_sub)
                    with m.If(last_sub & word.last):
                        m.d.comb += kinds.r_en.eq(1)

        kvp = self.kv.p
        m.d.comb += [self.kv.valid.eq(kv_full), kvp.tas.eq(kv_tas)]
        for e in range(DH):
            m.d.comb += [kvp.k[e].eq(entry.word_select(e, 8)), kvp.v[e].eq(entry.word_select(DH + e, 8))]
        with m.If(self.kv.valid & self.kv.ready):
            m.d.sync += kv_full.eq(0)

        # ---- the new keys and values: each head one region of EW words ------------------------------
        wb, wh, wl = Signal(range(B)), Signal(range(H)), Signal(range(L))
        waddr = Signal(self._aw)                  # the current layer's row's head's first entry
        wdata = Signal(EW * self._dw)
        wleft = Signal(range(EW + 1))
        kin = Cat(*(self.kv_in.p.k[e] for e in range(DH)), *(self.kv_in.p.v[e] for e in range(DH)))
        first_head = Signal(init=1)
        base = Mux(first_head, self.kv_base, waddr)
        m.d.comb += [wtr.i.valid.eq(self.kv_in.valid & (wleft == 0) & wpos.r_rdy),
                     self.kv_in.ready.eq(wtr.i.ready & (wleft == 0) & wpos.r_rdy),
                     wtr.i.p.addr.eq(base + wpos.r_data * STRIDE), wtr.i.p.words.eq(EW)]
        with m.If(self.kv_in.valid & self.kv_in.ready):
            m.d.sync += [wdata.eq(kin), wleft.eq(EW), waddr.eq(base + LBH), first_head.eq(0),
                         wh.eq(Mux(wh == H - 1, 0, wh + 1))]
            with m.If(wh == H - 1):
                m.d.sync += wb.eq(Mux(wb == B - 1, 0, wb + 1))
                with m.If(wb == B - 1):
                    m.d.sync += wl.eq(Mux(wl == L - 1, 0, wl + 1))
                    with m.If(wl == L - 1):
                        m.d.comb += wpos.r_en.eq(1)
                        m.d.sync += first_head.eq(1)
        m.d.comb += [wtr.w.valid.eq(wleft != 0), wtr.w.p.data.eq(wdata[:self._dw])]
        with m.If(wtr.w.valid & wtr.w.ready):
            m.d.sync += [wdata.eq(wdata >> self._dw), wleft.eq(wleft - 1)]
        m.d.comb += wtr.o.ready.eq(1)
        with m.If(wtr.o.valid):
            m.d.sync += acked.eq(acked + 1)
        return m
