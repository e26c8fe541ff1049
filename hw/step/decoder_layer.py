"""A whole decoder layer: attention, the post-attention norm, the MLP with FastCar and both residual adds."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.accelerator import Accelerator, cfg_layout
from hw.lib.widths import index_bits
from hw.step.attention_layer import AttentionLayer, group_layout, kv_layout
from hw.step.channel_join import channel_layout
from hw.step.residual import R_BITS, Residual, residual_out_layout
from hw.step.rmsnorm import RmsNorm, rmsnorm_in_layout
from hw.step.row_runs import weight_layout
from hw.step.tas_tap import decision_layout
from sw.config import AccelConfig
from sw.spec import quant

__all__ = ["DecoderLayer", "mlp_group_layout", "channel_layout"]


def mlp_group_layout(cfg: AccelConfig):
    """A step's layer as the MLP needs it: the layer (its weights in the accelerator), the position's
    index in its frame (the replay cache's), and the MLP output's constants into the residual."""
    return data.StructLayout({"layer": index_bits(cfg.layers), "index": index_bits(cfg.tokens_per_frame),
                              "y_mult": unsigned(quant.MULT_BITS), "y_shift": unsigned(quant.SHIFT_BITS)})


class DecoderLayer(wiring.Component):
    """One decoder layer for the ``batch`` rows of a step, bit for bit the golden model's: the
    attention (:class:`hw.step.attention_layer.AttentionLayer`), then::

        m     = rmsnorm(r_mid, n2)
        y     = the cached y of the same position one frame earlier if replay, else swiglu(m)
        r_out = saturate32(r_mid + requant_wide(y, y_mult, y_shift))

    with the MLP and the replay cache of the accelerator (:class:`hw.accel.accelerator.Accelerator`
    with ``decisions="row"``), each row's decision the attention's. Wiring and sequencing: the rows
    after attention are kept and normalised (:class:`hw.step.rmsnorm.RmsNorm`, the ``n2``
    constants of the step's layer taken from ``n2``), each normalised row goes to the accelerator
    with its decision as one row of a group, and each row it gives back meets its kept row in
    :class:`hw.step.residual.Residual`. One step's layer at a time.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator (and the MAC geometry of the attention's projections).
    heads, max_positions : int
        As :class:`hw.step.attention_layer.AttentionLayer`.

    Members
    -------
    i, w, wo, grp, kv, kv_out, eps
        As :class:`hw.step.attention_layer.AttentionLayer`.
    cfg : In(stream.Signature({data: cfg_layout(cfg)}))
        The accelerator's configuration: every layer's MLP weights and tables.
    n2 : In(stream.Signature(channel_layout()))
        The post-attention norm's constants, ``d_model`` beats per step's layer.
    mg : In(stream.Signature(mlp_group_layout(cfg)))
        One beat per step's layer, taken when its rows have left.
    o : Out(stream.Signature(residual_out_layout()))
        The rows out of the layer, in order.
    d : Out(stream.Signature(decision_layout()))
        Each row's decision as the MLP used it.
    """

    def __init__(self, cfg: AccelConfig, heads, *, max_positions=1024):
        self._cfg = cfg
        self._attn = AttentionLayer(cfg.d_model, heads, cfg.batch, max_positions=max_positions,
                                    n_in=cfg.mv_in, n_out=cfg.mv_out)
        dh = cfg.d_model // heads
        super().__init__({
            "i": In(stream.Signature(rmsnorm_in_layout())),
            "w": In(stream.Signature(weight_layout(cfg.mv_in, cfg.mv_out))),
            "wo": In(stream.Signature(weight_layout(cfg.mv_in, cfg.mv_out))),
            "grp": In(stream.Signature(group_layout(dh, max_positions))),
            "kv": In(stream.Signature(kv_layout(dh))),
            "kv_out": Out(stream.Signature(kv_layout(dh))),
            "cfg": In(stream.Signature(data.StructLayout({"data": cfg_layout(cfg)}))),
            "n2": In(stream.Signature(channel_layout())),
            "mg": In(stream.Signature(mlp_group_layout(cfg))),
            "o": Out(stream.Signature(residual_out_layout())),
            "d": Out(stream.Signature(decision_layout())),
            "eps": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        D, B = cfg.d_model, cfg.batch
        g = self.mg.p

        m.submodules.attn = attn = self._attn
        m.submodules.norm = norm = RmsNorm(max_d=D)
        m.submodules.accel = accel = Accelerator(cfg, decisions="row")
        m.submodules.res = res = Residual()
        for name in ("i", "w", "wo", "grp", "kv"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(attn, name))
        wiring.connect(m, attn.kv_out, wiring.flipped(self.kv_out))
        wiring.connect(m, wiring.flipped(self.cfg), accel.cfg)
        m.d.comb += [attn.eps.eq(self.eps), norm.eps.eq(self.eps)]

        # ---- the step's layer: its n2 constants in, then its rows after attention ----------------------
        m.submodules.n2buf = n2buf = memory.Memory(shape=channel_layout(), depth=D, init=[])
        nw, nr = n2buf.write_port(), n2buf.read_port(domain="comb")
        n2_in = Signal(range(D + 1))
        m.d.comb += [self.n2.ready.eq(n2_in < D), nw.en.eq(self.n2.valid & self.n2.ready),
                     nw.addr.eq(n2_in), nw.data.eq(self.n2.payload)]
        with m.If(nw.en):
            m.d.sync += n2_in.eq(n2_in + 1)

        m.submodules.rbuf = rbuf = memory.Memory(shape=signed(R_BITS), depth=B * D, init=[])
        rw, rr = rbuf.write_port(), rbuf.read_port(domain="comb")
        taking = Signal(init=1)                       # this step's rows after attention are coming
        r_at = Signal(range(B * D))
        col = Signal(range(D))
        m.d.comb += [nr.addr.eq(col),
                     norm.i.valid.eq(attn.o.valid & taking & (n2_in == D)),
                     norm.i.p.data.r.eq(attn.o.p.data.r), norm.i.p.data.mult.eq(nr.data.mult),
                     norm.i.p.data.shift.eq(nr.data.shift), norm.i.p.last.eq(attn.o.p.last),
                     attn.o.ready.eq(norm.i.ready & taking & (n2_in == D)),
                     rw.addr.eq(r_at), rw.data.eq(attn.o.p.data.r)]
        with m.If(attn.o.valid & attn.o.ready):
            m.d.comb += rw.en.eq(1)
            m.d.sync += [r_at.eq(Mux(r_at == B * D - 1, 0, r_at + 1)), col.eq(Mux(col == D - 1, 0, col + 1))]
            with m.If(r_at == B * D - 1):
                m.d.sync += taking.eq(0)

        # ---- each normalised row, with its decision, to the MLP ---------------------------------------
        m.submodules.decs = decs = fifo.SyncFIFOBuffered(width=decision_layout().size, depth=max(2, B))
        m.d.comb += [decs.w_en.eq(attn.d.valid), decs.w_data.eq(attn.d.payload), attn.d.ready.eq(decs.w_rdy)]
        dec = Signal(decision_layout())
        m.d.comb += dec.eq(decs.r_data)
        row = Signal(data.ArrayLayout(signed(8), D))
        e_in = Signal(range(D))
        full = Signal()                               # a whole row is gathered
        b_in = Signal(range(B))
        m.d.comb += norm.o.ready.eq(~full)
        with m.If(norm.o.valid & norm.o.ready):
            m.d.sync += [row.as_value().word_select(e_in, 8).eq(norm.o.p.data.y),
                         e_in.eq(Mux(e_in == D - 1, 0, e_in + 1))]
            with m.If(e_in == D - 1):
                m.d.sync += full.eq(1)
        x = accel.x.p.data
        m.d.comb += [accel.x.valid.eq(full & decs.r_rdy & self.mg.valid),
                     x.x.eq(row), x.tas.eq(dec.data.tas), x.replay.eq(dec.data.replay),
                     x.layer.eq(g.layer), x.index.eq(g.index), x.row.eq(b_in),
                     accel.x.p.last.eq(b_in == B - 1),
                     decs.r_en.eq(accel.x.valid & accel.x.ready)]
        with m.If(accel.x.valid & accel.x.ready):
            m.d.sync += [full.eq(0), b_in.eq(Mux(b_in == B - 1, 0, b_in + 1))]

        # ---- each row the MLP gives back, an element a cycle, into the second residual add ------------
        y = Signal(data.ArrayLayout(signed(8), D))
        yb, ye = Signal(range(B)), Signal(range(D))
        sending = Signal()
        m.d.comb += [accel.y.ready.eq(~sending & self.d.ready), self.d.valid.eq(accel.y.valid & ~sending),
                     self.d.p.data.tas.eq(accel.y.p.user.tas), self.d.p.data.replay.eq(accel.y.p.user.replay)]
        with m.If(accel.y.valid & accel.y.ready):
            m.d.sync += [y.eq(accel.y.p.data), sending.eq(1), ye.eq(0)]
        m.d.comb += [rr.addr.eq(yb * D + ye),
                     res.i.valid.eq(sending), res.i.p.data.r.eq(rr.data), res.i.p.data.acc.eq(y[ye]),
                     res.i.p.data.mult.eq(g.y_mult), res.i.p.data.shift.eq(g.y_shift),
                     res.i.p.last.eq(ye == D - 1)]
        with m.If(res.i.valid & res.i.ready):
            m.d.sync += ye.eq(Mux(ye == D - 1, 0, ye + 1))
            with m.If(ye == D - 1):
                m.d.sync += [sending.eq(0), yb.eq(Mux(yb == B - 1, 0, yb + 1))]
        wiring.connect(m, res.o, wiring.flipped(self.o))

        # The step's layer is done when its last row has left the residual add.
        out_row = Signal(range(B))
        with m.If(self.o.valid & self.o.ready & self.o.p.last):
            m.d.sync += out_row.eq(Mux(out_row == B - 1, 0, out_row + 1))
            with m.If(out_row == B - 1):
                m.d.comb += self.mg.ready.eq(1)
                m.d.sync += [taking.eq(1), n2_in.eq(0)]
        return m
