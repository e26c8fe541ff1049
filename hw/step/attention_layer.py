"""A layer's attention, whole: from the residual rows into the layer to the residual after attention."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.step.attention_head import AttentionHead
from hw.step.projection import Projection
from hw.step.qkv import QkvRope
from hw.step.residual import R_BITS, Residual, residual_out_layout
from hw.step.rmsnorm import rmsnorm_in_layout
from hw.step.row_runs import RowRuns, weight_layout
from hw.step.tas_tap import decision_layout
from sw.spec import quant

__all__ = ["AttentionLayer", "group_layout", "kv_layout"]


def group_layout(head_dim, max_positions):
    """What a step's layer needs besides its rows and weights: the position's RoPE tables, the number
    of earlier positions each head attends (``history``; the current one is added), the softmax's
    and ``o / E``'s constants and the TAS threshold."""
    h = head_dim // 2
    return data.StructLayout({
        "c": data.ArrayLayout(signed(16), h), "s": data.ArrayLayout(signed(16), h),
        "history": range(max_positions),
        "a_exp": 32, "a_mult": unsigned(quant.MULT_BITS), "a_shift": unsigned(quant.SHIFT_BITS),
        "threshold": signed(quant.ACC_BITS + 1)})


def kv_layout(head_dim):
    """A position's key and value of one head; ``tas`` marks the position one frame earlier."""
    return data.StructLayout({"k": data.ArrayLayout(signed(8), head_dim),
                              "v": data.ArrayLayout(signed(8), head_dim), "tas": 1})


class AttentionLayer(wiring.Component):
    """One layer's attention for the ``batch`` rows of a step, bit for bit the golden model's::

        q, k, v = rope(requantize(rmsnorm(r, n1) @ wq)), rope(... @ wk), requantize(... @ wv)
        attn    = softmax_av(q . k_j over the attended positions j) per head
        r_mid   = saturate32(r + requant_wide(attn @ wo, o))
        tas, replay from the scores of the position one frame earlier

    Wiring and sequencing of the step's blocks, one step's layer at a time:
    :class:`hw.step.qkv.QkvRope` (rows on ``i``, its weights on ``w``) gives each row's heads; each
    head's new key and value leave on ``kv_out`` (for the KV cache), and its ``q`` meets the
    ``history`` earlier positions' keys and values from ``kv`` and then its own in
    :class:`hw.step.attention_head.AttentionHead`, whose decisions leave on ``d``; the heads'
    outputs are each row's ``attn``, run through :class:`hw.step.row_runs.RowRuns` against ``wo``
    (with the o projection's channel constants) into :class:`hw.step.projection.Projection` (int32)
    and :class:`hw.step.residual.Residual` with the rows kept from ``i``; the rows after attention
    leave on ``o`` in order. The next step's rows are taken once these have left.

    Parameters
    ----------
    d_model, heads, batch : int
    max_positions : int
        The most positions a head attends.
    n_in, n_out : int
        The MAC unit's geometry.

    Members
    -------
    i : In(stream.Signature(rmsnorm_in_layout()))
    w, wo : In(stream.Signature(weight_layout(n_in, n_out)))
        The q, k and v blocks; the o projection's blocks with its channel constants.
    grp : In(stream.Signature(group_layout(head_dim, max_positions)))
        One beat per step's layer, taken when its rows have left.
    kv : In(stream.Signature(kv_layout(head_dim)))
        Row by row, head by head, the ``history`` earlier positions in order.
    kv_out : Out(stream.Signature(kv_layout(head_dim)))
        Row by row, head by head, the new position's key (after RoPE) and value.
    o : Out(stream.Signature(residual_out_layout()))
    d : Out(stream.Signature(decision_layout()))
    eps : In(32)
    """

    def __init__(self, d_model, heads, batch, *, max_positions=1024, n_in=8, n_out=8):
        for name, v in (("d_model", d_model), ("heads", heads), ("batch", batch),
                        ("max_positions", max_positions), ("n_in", n_in), ("n_out", n_out)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"AttentionLayer {name} must be a positive integer, not {v!r}")
        if d_model % n_out:
            raise ValueError(f"AttentionLayer n_out ({n_out}) must divide d_model ({d_model})")
        self._d, self._h, self._b, self._p = d_model, heads, batch, max_positions
        self._ni, self._no = n_in, n_out
        self._qkv = QkvRope(d_model, heads, batch, n_in=n_in, n_out=n_out)     # checks the rest
        dh = d_model // heads
        super().__init__({
            "i": In(stream.Signature(rmsnorm_in_layout())),
            "w": In(stream.Signature(weight_layout(n_in, n_out))),
            "wo": In(stream.Signature(weight_layout(n_in, n_out))),
            "grp": In(stream.Signature(group_layout(dh, max_positions))),
            "kv": In(stream.Signature(kv_layout(dh))),
            "kv_out": Out(stream.Signature(kv_layout(dh))),
            "o": Out(stream.Signature(residual_out_layout())),
            "d": Out(stream.Signature(decision_layout())),
            "eps": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        D, H, B, NI, NO = self._d, self._h, self._b, self._ni, self._no
        DH, JB = D // H, D // NO
        g = self.grp.p

        m.submodules.qkv = qkv = self._qkv
        m.submodules.head = head = AttentionHead(DH, self._p)
        m.submodules.runs = runs = RowRuns(D, NI, NO, groups=1, blocks=JB, max_repeat=B, report=True)
        m.submodules.proj = proj = Projection(NI, NO, requant=False)
        m.submodules.res = res = Residual()
        wiring.connect(m, wiring.flipped(self.w), qkv.w)
        wiring.connect(m, wiring.flipped(self.wo), runs.w)
        wiring.connect(m, runs.o, proj.i)
        wiring.connect(m, head.d, wiring.flipped(self.d))
        m.d.comb += [qkv.eps.eq(self.eps), runs.repeat.eq(B),
                     head.a_exp.eq(g.a_exp), head.a_mult.eq(g.a_mult), head.a_shift.eq(g.a_shift),
                     head.threshold.eq(g.threshold)]

        # ---- rows in: to the q/k/v front, and kept for the residual add -----------------------------
        m.submodules.rbuf = rbuf = memory.Memory(shape=signed(R_BITS), depth=B * D, init=[])
        rw = rbuf.write_port()
        rr = rbuf.read_port(domain="comb")
        rows_ok = Signal(init=1)                      # the previous step's rows have left
        r_in = Signal(range(B * D))
        m.d.comb += [qkv.i.valid.eq(self.i.valid & rows_ok), qkv.i.payload.eq(self.i.payload),
                     self.i.ready.eq(qkv.i.ready & rows_ok),
                     rw.addr.eq(r_in), rw.data.eq(self.i.p.data.r)]
        with m.If(self.i.valid & self.i.ready):
            m.d.comb += rw.en.eq(1)
            m.d.sync += r_in.eq(Mux(r_in == B * D - 1, 0, r_in + 1))
            with m.If(r_in == B * D - 1):
                m.d.sync += rows_ok.eq(0)

        # The position's tables go to the front once per step (the group beat waits until its end).
        pos_used = Signal()
        m.d.comb += [qkv.pos.valid.eq(self.grp.valid & ~pos_used), qkv.pos.p.c.eq(g.c), qkv.pos.p.s.eq(g.s)]
        with m.If(qkv.pos.valid & qkv.pos.ready):
            m.d.sync += pos_used.eq(1)

        # ---- each head: its new key and value out, then its q against the history and itself ----------
        cur = Signal(qkv.o.p.shape())                # the head being attended
        have, told = Signal(), Signal()              # a head is held; its key and value have left
        seen = Signal(range(self._p))                # history positions sent
        hh = Signal(range(H))                        # the held head's index in its row
        m.d.comb += qkv.o.ready.eq(~have)
        with m.If(qkv.o.valid & ~have):
            m.d.sync += [cur.eq(qkv.o.payload), have.eq(1), told.eq(0), seen.eq(0)]
        m.d.comb += [self.kv_out.valid.eq(have & ~told), self.kv_out.p.k.eq(cur.data.k),
                     self.kv_out.p.v.eq(cur.data.v), self.kv_out.p.tas.eq(0)]
        with m.If(self.kv_out.valid & self.kv_out.ready):
            m.d.sync += told.eq(1)
        own = seen == g.history                      # the history is through: the head's own position
        a = head.i.p
        m.d.comb += [a.data.q.eq(cur.data.q),
                     a.data.k.eq(Mux(own, cur.data.k, self.kv.p.k)),
                     a.data.v.eq(Mux(own, cur.data.v, self.kv.p.v)),
                     a.data.tas.eq(~own & self.kv.p.tas), a.data.end.eq(own & cur.last), a.last.eq(own),
                     head.i.valid.eq(have & told & (own | self.kv.valid)),
                     self.kv.ready.eq(have & told & ~own & head.i.ready)]
        with m.If(head.i.valid & head.i.ready):
            with m.If(own):
                m.d.sync += [have.eq(0), hh.eq(Mux(hh == H - 1, 0, hh + 1))]
            with m.Else():
                m.d.sync += seen.eq(seen + 1)

        # ---- the heads' outputs are the rows of attn, into the o projection -----------------------------
        oh = Signal(range(H))                        # the head whose output is leaving
        m.d.comb += [runs.i.valid.eq(head.o.valid), runs.i.p.data.y.eq(head.o.p.data.y),
                     runs.i.p.last.eq(head.o.p.last & (oh == H - 1)), head.o.ready.eq(runs.i.ready)]
        with m.If(head.o.valid & head.o.ready & head.o.p.last):
            m.d.sync += oh.eq(Mux(oh == H - 1, 0, oh + 1))

        # ---- the o projection's blocks (block, row) into the residual, an element a cycle -------------
        const_layout = data.StructLayout({"mult": data.ArrayLayout(unsigned(quant.MULT_BITS), NO),
                                          "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), NO)})
        m.submodules.consts = consts = fifo.SyncFIFOBuffered(width=const_layout.size, depth=4)
        kin = Signal(const_layout)
        m.d.comb += [kin.mult.eq(runs.k.p.mult), kin.shift.eq(runs.k.p.shift),
                     consts.w_data.eq(kin), consts.w_en.eq(runs.k.valid), runs.k.ready.eq(consts.w_rdy)]
        kc = Signal(const_layout)
        m.d.comb += kc.eq(consts.r_data)
        acc = Signal(data.ArrayLayout(signed(quant.ACC_BITS), NO))
        sending = Signal()
        n = Signal(range(NO))
        bj, bb = Signal(range(JB)), Signal(range(B))  # the block and row being sent
        m.d.comb += proj.o.ready.eq(~sending)
        with m.If(proj.o.valid & ~sending):
            m.d.sync += [acc.eq(proj.o.p.data.y), sending.eq(1), n.eq(0)]
        addr = Signal(range(B * D))
        m.d.comb += [addr.eq(bb * D + bj * NO + n), rr.addr.eq(addr),
                     res.i.valid.eq(sending), res.i.p.data.r.eq(rr.data), res.i.p.data.acc.eq(acc[n]),
                     res.i.p.data.mult.eq(kc.mult[n]), res.i.p.data.shift.eq(kc.shift[n]),
                     res.i.p.last.eq(0)]
        with m.If(res.i.valid & res.i.ready):
            m.d.sync += n.eq(Mux(n == NO - 1, 0, n + 1))
            with m.If(n == NO - 1):
                m.d.sync += [sending.eq(0), bb.eq(Mux(bb == B - 1, 0, bb + 1))]
                with m.If(bb == B - 1):
                    m.d.comb += consts.r_en.eq(1)
                    m.d.sync += bj.eq(Mux(bj == JB - 1, 0, bj + 1))

        # The rows after attention, in the order the residual leaves them, into a buffer; then out in
        # row order, and the step is done.
        m.submodules.mbuf = mbuf = memory.Memory(shape=signed(R_BITS), depth=B * D, init=[])
        mw, mr = mbuf.write_port(), mbuf.read_port(domain="comb")
        wj, wb, wn = Signal(range(JB)), Signal(range(B)), Signal(range(NO))
        done = Signal()                               # every element of the step is in mbuf
        m.d.comb += [res.o.ready.eq(~done), mw.en.eq(res.o.valid & ~done),
                     mw.addr.eq(wb * D + wj * NO + wn), mw.data.eq(res.o.p.data.r)]
        with m.If(mw.en):
            m.d.sync += wn.eq(Mux(wn == NO - 1, 0, wn + 1))
            with m.If(wn == NO - 1):
                m.d.sync += wb.eq(Mux(wb == B - 1, 0, wb + 1))
                with m.If(wb == B - 1):
                    m.d.sync += wj.eq(Mux(wj == JB - 1, 0, wj + 1))
                    with m.If(wj == JB - 1):
                        m.d.sync += done.eq(1)
        out = Signal(range(B * D))
        m.d.comb += [mr.addr.eq(out), self.o.valid.eq(done), self.o.p.data.r.eq(mr.data),
                     self.o.p.last.eq(out % D == D - 1)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += out.eq(Mux(out == B * D - 1, 0, out + 1))
            with m.If(out == B * D - 1):              # the step's layer is done
                m.d.comb += self.grp.ready.eq(1)
                m.d.sync += [done.eq(0), rows_ok.eq(1), pos_used.eq(0)]
        return m
