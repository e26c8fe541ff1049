"""The front of a layer: the input norm, the q, k and v projections and RoPE, for every row of a step."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.step.projection import Projection
from hw.step.rmsnorm import RmsNorm, rmsnorm_in_layout
from hw.step.rope import Rope
from hw.step.row_runs import RowRuns, weight_layout

__all__ = ["QkvRope", "qkv_head_layout", "rope_row_layout"]


def qkv_head_layout(head_dim):
    """One head of a row: ``q`` and ``k`` after RoPE, ``v``; ``last`` on the row's last head."""
    return data.StructLayout({
        "data": data.StructLayout({n: data.ArrayLayout(signed(8), head_dim) for n in ("q", "k", "v")}),
        "last": 1})


def rope_row_layout(head_dim):
    """The position's RoPE tables, ``rint(cos * 2**14)`` and ``rint(sin * 2**14)``."""
    h = head_dim // 2
    return data.StructLayout({"c": data.ArrayLayout(signed(16), h), "s": data.ArrayLayout(signed(16), h)})


class QkvRope(wiring.Component):
    """The golden model's ``xn = rmsnorm(r, n1)``, ``q, k, v = requantize(xn @ w)`` and RoPE of ``q``
    and ``k`` at the step's position, for the ``batch`` rows of a step, bit for bit.

    Only wiring and sequencing: :class:`hw.step.rmsnorm.RmsNorm` into
    :class:`hw.step.row_runs.RowRuns` (one group of ``batch`` rows; the blocks of ``n_out`` outputs of
    ``wq``, then ``wk``, then ``wv``, each taken once from ``w`` with its channels' requantisation
    constants and run against every row) into :class:`hw.step.projection.Projection` (the
    requantiser lanes). Its blocks are kept in a buffer; once the step's last is in, each row's
    heads are read from it, ``q`` and then ``k`` of a head go through one
    :class:`hw.step.rope.Rope` with the position's tables (a beat of ``pos`` per step), and the
    head leaves on ``o`` with its ``v``. The next step's blocks wait in the projection meanwhile.

    Parameters
    ----------
    d_model, heads, batch : int
    n_in, n_out : int
        The MAC unit's geometry; ``n_in`` divides ``d_model``, ``n_out`` divides ``d_model / heads``.

    Members
    -------
    i : In(stream.Signature(rmsnorm_in_layout()))
        The step's rows of the residual stream, an element a beat with the norm's constants.
    w : In(stream.Signature(weight_layout(n_in, n_out)))
        The q, k and v weights and constants, a block of ``n_out`` outputs after another.
    pos : In(stream.Signature(rope_row_layout(d_model // heads)))
        The step's position's tables, one beat per step.
    o : Out(stream.Signature(qkv_head_layout(d_model // heads)))
        Row by row, head by head.
    eps : In(32)
    """

    def __init__(self, d_model, heads, batch, *, n_in=8, n_out=8):
        for name, v in (("d_model", d_model), ("heads", heads), ("batch", batch), ("n_in", n_in),
                        ("n_out", n_out)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"QkvRope {name} must be a positive integer, not {v!r}")
        if d_model % heads or (d_model // heads) % 2:
            raise ValueError(f"QkvRope heads ({heads}) must divide d_model ({d_model}) into even head_dim")
        if d_model % n_in:
            raise ValueError(f"QkvRope n_in ({n_in}) must divide d_model ({d_model})")
        if (d_model // heads) % n_out:
            raise ValueError(f"QkvRope n_out ({n_out}) must divide head_dim ({d_model // heads})")
        self._d, self._h, self._b, self._ni, self._no = d_model, heads, batch, n_in, n_out
        dh = d_model // heads
        super().__init__({
            "i": In(stream.Signature(rmsnorm_in_layout())),
            "w": In(stream.Signature(weight_layout(n_in, n_out))),
            "pos": In(stream.Signature(rope_row_layout(dh))),
            "o": Out(stream.Signature(qkv_head_layout(dh))),
            "eps": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        D, H, B, NI, NO = self._d, self._h, self._b, self._ni, self._no
        DH = D // H
        JB, WH = D // NO, DH // NO                   # blocks of a row, words of a head

        m.submodules.norm = norm = RmsNorm(max_d=D)
        m.submodules.runs = runs = RowRuns(D, NI, NO, groups=1, blocks=3 * JB, max_repeat=B)
        m.submodules.proj = proj = Projection(NI, NO, requant=True)
        m.submodules.rope = rope = Rope(DH)
        wiring.connect(m, wiring.flipped(self.i), norm.i)
        wiring.connect(m, norm.o, runs.i)
        wiring.connect(m, wiring.flipped(self.w), runs.w)
        wiring.connect(m, runs.o, proj.i)
        m.d.comb += [norm.eps.eq(self.eps), runs.repeat.eq(B)]

        # ---- the projections' blocks into the buffer: matrix, block, row ------------------------------
        word = data.ArrayLayout(signed(8), NO)
        m.submodules.buf = buf = memory.Memory(shape=word, depth=3 * B * JB, init=[])
        bw, br = buf.write_port(), buf.read_port(domain="comb")
        mat = Signal(range(3))
        j = Signal(range(JB))
        b = Signal(range(B))
        full = Signal()                              # the step's blocks are all in
        m.d.comb += [proj.o.ready.eq(~full), bw.en.eq(proj.o.valid & ~full),
                     bw.addr.eq((mat * B + b) * JB + j), bw.data.eq(proj.o.p.data.y)]
        with m.If(bw.en):
            m.d.sync += b.eq(Mux(b == B - 1, 0, b + 1))
            with m.If(b == B - 1):
                m.d.sync += j.eq(Mux(j == JB - 1, 0, j + 1))
                with m.If(j == JB - 1):
                    m.d.sync += mat.eq(Mux(mat == 2, 0, mat + 1))
                    with m.If(mat == 2):
                        m.d.sync += full.eq(1)

        # ---- each head: read q, k, v; q and k through RoPE; out with v --------------------------------
        head_layout = data.ArrayLayout(signed(8), DH)
        q, k, v = (Signal(head_layout, name=n) for n in ("q", "k", "v"))
        ob, oh = Signal(range(B)), Signal(range(H))  # the head being read
        rm, rw = Signal(range(3)), Signal(range(WH))  # the matrix and word being read
        m.d.comb += br.addr.eq((rm * B + ob) * JB + oh * WH + rw)
        sent, got = Signal(range(3)), Signal(range(3))
        q_rot = Signal(head_layout)
        out = Signal(head_layout)                    # k after RoPE
        m.d.comb += [rope.i.p.c.eq(self.pos.p.c), rope.i.p.s.eq(self.pos.p.s),
                     rope.i.p.x.eq(Mux(sent == 0, q, k)), rope.o.ready.eq(1),
                     self.o.p.data.q.eq(q_rot), self.o.p.data.k.eq(out), self.o.p.data.v.eq(v),
                     self.o.p.last.eq(oh == H - 1)]
        with m.FSM():
            with m.State("wait"):
                with m.If(full & self.pos.valid):
                    m.d.sync += [rm.eq(0), rw.eq(0)]
                    m.next = "read"
            with m.State("read"):
                for r, reg in enumerate((q, k, v)):
                    for n in range(WH):
                        with m.If((rm == r) & (rw == n)):
                            m.d.sync += reg.as_value()[8 * NO * n:8 * NO * (n + 1)].eq(br.data.as_value())
                m.d.sync += rw.eq(Mux(rw == WH - 1, 0, rw + 1))
                with m.If(rw == WH - 1):
                    m.d.sync += rm.eq(rm + 1)
                    with m.If(rm == 2):
                        m.d.sync += [sent.eq(0), got.eq(0)]
                        m.next = "rope"
            with m.State("rope"):
                m.d.comb += rope.i.valid.eq(sent < 2)
                with m.If(rope.i.valid & rope.i.ready):
                    m.d.sync += sent.eq(sent + 1)
                with m.If(rope.o.valid):
                    m.d.sync += got.eq(got + 1)
                    with m.If(got == 0):
                        m.d.sync += q_rot.eq(rope.o.p.y)
                    with m.Else():
                        m.d.sync += out.eq(rope.o.p.y)
                        m.next = "out"
            with m.State("out"):
                m.d.comb += self.o.valid.eq(1)
                with m.If(self.o.ready):
                    m.d.sync += [rm.eq(0), rw.eq(0), oh.eq(Mux(oh == H - 1, 0, oh + 1))]
                    m.next = "read"
                    with m.If(oh == H - 1):
                        m.d.sync += ob.eq(Mux(ob == B - 1, 0, ob + 1))
                        with m.If(ob == B - 1):           # the step's last head: its tables are used
                            m.d.comb += self.pos.ready.eq(1)
                            m.d.sync += full.eq(0)
                            m.next = "wait"
        return m
