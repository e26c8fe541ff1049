"""The int8 systolic array: rows x cols processing elements plus column accumulators."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.pe import ProcessingElement
from hw.widths import index_bits
from sw import quant
from sw.config import TileConfig

__all__ = ["SystolicArray", "issue_layout", "result_layout", "weight_layout"]



def issue_layout(cfg: TileConfig):
    """One array beat: ``rows`` activations of K-slice ``kt`` for N-slice ``nt``."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), cfg.rows),
        "kt": index_bits(cfg.k_tiles),
        "nt": index_bits(cfg.n_tiles),
    })


def result_layout(cfg: TileConfig):
    """One finished N-slice: ``cols`` int32 sums of output channels ``nt*cols ...``."""
    return data.StructLayout({
        "acc": data.ArrayLayout(signed(quant.ACC_BITS), cfg.cols),
        "nt": index_bits(cfg.n_tiles),
    })


def weight_layout(cfg: TileConfig):
    """One weight-load beat: word ``addr`` of every PE; ``data[r*cols + c]`` goes to PE (r, c).

    Word ``addr = nt * k_tiles + kt`` of PE (r, c) holds ``w[kt*rows + r, nt*cols + c]``.
    """
    return data.StructLayout({
        "addr": index_bits(cfg.weight_depth),
        "data": data.ArrayLayout(signed(8), cfg.rows * cfg.cols),
    })


class SystolicArray(wiring.Component):
    """Weight-resident, activation-streaming int8 systolic array.

    Dataflow
    --------
    Every PE keeps its share of the *whole* weight matrix in a private memory, so weights are never
    reloaded between rows. An activation row is cut into ``k_tiles`` slices of ``rows`` values; a
    slice enters the array from the left (row ``r`` delayed by ``r`` cycles) and flows right, each
    PE multiplying it with the weight at the address that travels with it. Partial sums flow down
    the columns, and a column accumulator at the bottom adds up the ``k_tiles`` slices of one output
    channel. One beat per cycle, so for ``B`` rows::

        cycles = B * (K / rows) * (N / cols) + latency        (latency = rows + cols + 2)

    Every PE does a useful MAC in every issue cycle, whatever ``B`` is: the time falls in proportion
    to the number of rows that are really computed, which is what FastCar's replay needs. A
    weight-stationary array that reloads a ``rows x cols`` weight tile for every batch would spend
    ``rows`` load cycles per tile and so, for ``B`` close to 1, mostly wait for weights. The price of
    this dataflow is weight bandwidth: each PE reads one weight per cycle from its own memory, which
    on-chip block RAM provides and an off-chip memory would not (see ``docs/architecture.md``).

    The array never stalls: beats carry a valid bit and results leave with a valid bit, so
    ``i`` and ``o`` are always-ready streams; flow control is the tile's job (credits).

    Parameters
    ----------
    cfg : TileConfig
        Geometry.

    Members
    -------
    i : In(stream.Signature(issue_layout(cfg), always_ready=True))
        Beats: activation slice, slice index ``kt`` and output slice ``nt``.
    o : Out(stream.Signature(result_layout(cfg), always_ready=True))
        One N-slice of int32 sums per ``k_tiles`` beats, all columns aligned.
    w : In(stream.Signature(weight_layout(cfg), always_ready=True))
        Weight loading, one word of every PE per beat.
    """

    def __init__(self, cfg: TileConfig):
        self._cfg = cfg
        super().__init__({
            "i": In(stream.Signature(issue_layout(cfg), always_ready=True)),
            "o": Out(stream.Signature(result_layout(cfg), always_ready=True)),
            "w": In(stream.Signature(weight_layout(cfg), always_ready=True)),
        })

    @property
    def cfg(self):
        return self._cfg

    @property
    def latency(self):
        """Cycles from an issue beat of slice ``kt = k_tiles - 1`` to its result on ``o``."""
        return self._cfg.rows + self._cfg.cols + 2

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C, KT = cfg.rows, cfg.cols, cfg.k_tiles
        aw = index_bits(cfg.weight_depth)

        pes = [[ProcessingElement(cfg.weight_depth) for _ in range(C)] for _ in range(R)]
        for r in range(R):
            for c in range(C):
                m.submodules[f"pe_{r}_{c}"] = pes[r][c]

        # Weight address of the beat: word nt * k_tiles + kt.
        addr = Signal(aw)
        m.d.comb += addr.eq(self.i.p.nt * KT + self.i.p.kt)

        # Input skew: row r sees the beat r cycles late.
        for r in range(R):
            x, a, v = self.i.p.x[r], addr, self.i.valid
            for d in range(r):
                xd = Signal(signed(8), name=f"skew_x_{r}_{d}")
                ad = Signal(aw, name=f"skew_a_{r}_{d}")
                vd = Signal(name=f"skew_v_{r}_{d}")
                m.d.sync += [xd.eq(x), ad.eq(a), vd.eq(v)]
                x, a, v = xd, ad, vd
            m.d.comb += [pes[r][0].x_i.eq(x), pes[r][0].addr_i.eq(a), pes[r][0].v_i.eq(v)]
            for c in range(1, C):
                m.d.comb += [
                    pes[r][c].x_i.eq(pes[r][c - 1].x_o),
                    pes[r][c].addr_i.eq(pes[r][c - 1].addr_o),
                    pes[r][c].v_i.eq(pes[r][c - 1].v_o),
                ]
            for c in range(C):
                m.d.comb += pes[r][c].s_i.eq(0 if r == 0 else pes[r - 1][c].s_o)
                m.d.comb += [
                    pes[r][c].we.eq(self.w.valid),
                    pes[r][c].waddr.eq(self.w.p.addr),
                    pes[r][c].wdata.eq(self.w.p.data[r * C + c]),
                ]

        # Control (valid, first/last slice, nt) reaches the bottom of column c at t0 + R + 2 + c,
        # together with the partial sum of the beat issued at t0 (PE latency: see hw/pe.py).
        ctrl_layout = data.StructLayout({"v": 1, "first": 1, "last": 1, "nt": len(self.i.p.nt)})
        ctrl = Signal(ctrl_layout)
        m.d.comb += [
            ctrl.v.eq(self.i.valid),
            ctrl.first.eq(self.i.p.kt == 0),
            ctrl.last.eq(self.i.p.kt == KT - 1),
            ctrl.nt.eq(self.i.p.nt),
        ]
        col_ctrl = []
        for d in range(R + 2 + C - 1):
            nxt = Signal(ctrl_layout, name=f"ctrl_d{d + 1}")
            m.d.sync += nxt.eq(ctrl)
            ctrl = nxt
            if d >= R + 1:
                col_ctrl.append(ctrl)
        assert len(col_ctrl) == C

        # Column accumulators, then de-skew so that all columns leave together.
        # Column c finishes at t0 + R + 3 + c and waits C - 1 - c cycles.
        outs = []
        for c in range(C):
            cc = col_ctrl[c]
            acc = Signal(signed(quant.ACC_BITS), name=f"acc_{c}")
            done = Signal(name=f"done_{c}")
            s = pes[R - 1][c].s_o
            with m.If(cc.v):
                m.d.sync += acc.eq(Mux(cc.first, 0, acc) + s)
            m.d.sync += done.eq(cc.v & cc.last)
            out = acc
            for d in range(C - 1 - c):
                od = Signal(signed(quant.ACC_BITS), name=f"deskew_{c}_{d}")
                m.d.sync += od.eq(out)
                out = od
            outs.append(out)
            if c == C - 1:
                m.d.comb += self.o.valid.eq(done)
                nt_last = Signal.like(cc.nt, name="nt_out")
                m.d.sync += nt_last.eq(cc.nt)
        # o.valid and nt_out are registered from the last column's control, in step with its acc.
        m.d.comb += self.o.p.nt.eq(nt_last)
        for c in range(C):
            m.d.comb += self.o.p.acc[c].eq(outs[c])
        return m
