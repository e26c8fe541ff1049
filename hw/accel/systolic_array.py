"""The int8 systolic array: rows x cols processing elements plus column accumulators."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.pe import ProcessingElement
from hw.lib.widths import index_bits, mul_const, sum_bits
from sw.config import TileConfig
from sw.golden import quant

__all__ = ["SystolicArray", "issue_layout", "result_layout", "weight_layout"]



def issue_layout(cfg: TileConfig, banks: int = 1):
    """One array beat: ``rows`` activations of K-slice ``kt`` for N-slice ``nt`` of weight bank
    ``bank``."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), cfg.rows),
        "kt": index_bits(cfg.k_tiles),
        "nt": index_bits(cfg.n_tiles),
        "bank": index_bits(banks),
    })


def result_layout(cfg: TileConfig, banks: int = 1):
    """One finished N-slice: ``cols`` int32 sums of output channels ``nt*cols ...`` of ``bank``."""
    return data.StructLayout({
        "acc": data.ArrayLayout(signed(quant.ACC_BITS), cfg.cols),
        "nt": index_bits(cfg.n_tiles),
        "bank": index_bits(banks),
    })


def weight_layout(cfg: TileConfig, banks: int = 1):
    """One weight-load beat: word ``addr`` of every PE; ``data[r*cols + c]`` goes to PE (r, c).

    Word ``addr = (bank * n_tiles + nt) * k_tiles + kt`` of PE (r, c) holds
    ``w_bank[kt*rows + r, nt*cols + c]``: each bank is one ``k_dim x n_dim`` matrix.
    """
    return data.StructLayout({
        "addr": index_bits(banks * cfg.weight_depth),
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

        cycles = B * (K / rows) * (N / cols) + latency        (latency = rows + cols + 4)

    Every PE does a useful MAC in every issue cycle, whatever ``B`` is: the time falls in proportion
    to the number of rows that are really computed, which is what FastCar's replay needs. A
    weight-stationary array that reloads a ``rows x cols`` weight tile for every batch would spend
    ``rows`` load cycles per tile and so, for ``B`` close to 1, mostly wait for weights. The price of
    this dataflow is weight bandwidth: each PE reads one weight per cycle from its own memory, which
    on-chip block RAM provides and an off-chip memory would not (see ``docs/architecture.md``).

    The array never stalls: beats carry a valid bit and results leave with a valid bit, so
    ``i`` and ``o`` are always-ready streams; flow control is the tile's job (credits).

    ``banks`` matrices of the tile's shape are held at once (for example one per layer and hidden
    chunk); a beat names the bank it uses. ``lanes`` independent arrays (cores) share the weight
    memories, each PE memory giving every lane its own read port (see :class:`ProcessingElement`).

    Parameters
    ----------
    cfg : TileConfig
        Geometry of one bank.
    lanes : int
        Cores sharing the weights.
    banks : int
        Matrices held.

    Members
    -------
    i : In(stream.Signature(issue_layout(cfg, banks), always_ready=True)).array(lanes)
        Beats: activation slice, slice index ``kt``, output slice ``nt`` and bank.
    o : Out(stream.Signature(result_layout(cfg, banks), always_ready=True)).array(lanes)
        One N-slice of int32 sums per ``k_tiles`` beats, all columns aligned.
    w : In(stream.Signature(weight_layout(cfg, banks), always_ready=True))
        Weight loading, one word of every PE per beat.
    """

    def __init__(self, cfg: TileConfig, *, lanes: int = 1, banks: int = 1):
        self._cfg, self._lanes, self._banks = cfg, lanes, banks
        super().__init__({
            "i": In(stream.Signature(issue_layout(cfg, banks), always_ready=True)).array(lanes),
            "o": Out(stream.Signature(result_layout(cfg, banks), always_ready=True)).array(lanes),
            "w": In(stream.Signature(weight_layout(cfg, banks), always_ready=True)),
        })

    @property
    def cfg(self):
        return self._cfg

    #: The beat's register before the skew (address computed there).
    ISSUE_CYCLES = 1

    @property
    def latency(self):
        """Cycles from an issue beat of slice ``kt = k_tiles - 1`` to its result on ``o``."""
        return self._cfg.rows + self._cfg.cols + ProcessingElement.latency + self.ISSUE_CYCLES

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C, KT, NT = cfg.rows, cfg.cols, cfg.k_tiles, cfg.n_tiles
        depth = self._banks * cfg.weight_depth
        aw = index_bits(depth)
        psum = sum_bits(R)
        pes = [[ProcessingElement(depth, self._lanes, psum) for _ in range(C)] for _ in range(R)]
        for r in range(R):
            for c in range(C):
                m.submodules[f"pe_{r}_{c}"] = pes[r][c]
                m.d.comb += [
                    pes[r][c].we.eq(self.w.valid),
                    pes[r][c].waddr.eq(self.w.p.addr),
                    pes[r][c].wdata.eq(self.w.p.data[r * C + c]),
                ]
        for lane in range(self._lanes):
            self._lane(m, pes, lane, aw, R, C, KT, NT)
        return m

    def _lane(self, m, pes, lane, aw, R, C, KT, NT):
        i, o = self.i[lane], self.o[lane]
        # Weight address of the beat: word (bank * n_tiles + nt) * k_tiles + kt, registered with
        # the beat (its adders stay out of the block RAM's address path).
        addr = Signal(aw, name=f"addr_l{lane}")
        xin = Signal(data.ArrayLayout(signed(8), R), name=f"x_l{lane}")
        vin = Signal(name=f"v_l{lane}")
        m.d.sync += [addr.eq(mul_const(mul_const(i.p.bank, NT) + i.p.nt, KT) + i.p.kt),
                     xin.eq(i.p.x), vin.eq(i.valid)]
        # Input skew: row r sees the beat r cycles late.
        for r in range(R):
            x, a, v = xin[r], addr, vin
            for d in range(r):
                xd = Signal(signed(8), name=f"skew_x_l{lane}_{r}_{d}")
                ad = Signal(aw, name=f"skew_a_l{lane}_{r}_{d}")
                vd = Signal(name=f"skew_v_l{lane}_{r}_{d}")
                m.d.sync += [xd.eq(x), ad.eq(a), vd.eq(v)]
                x, a, v = xd, ad, vd
            m.d.comb += [pes[r][0].x_i[lane].eq(x), pes[r][0].addr_i[lane].eq(a),
                         pes[r][0].v_i[lane].eq(v)]
            for c in range(1, C):
                m.d.comb += [
                    pes[r][c].x_i[lane].eq(pes[r][c - 1].x_o[lane]),
                    pes[r][c].addr_i[lane].eq(pes[r][c - 1].addr_o[lane]),
                    pes[r][c].v_i[lane].eq(pes[r][c - 1].v_o[lane]),
                ]
            for c in range(C):
                m.d.comb += pes[r][c].s_i[lane].eq(0 if r == 0 else pes[r - 1][c].s_o[lane])
        # Control (valid, first/last slice, nt, bank) reaches the bottom of column c at
        # t0 + ISSUE_CYCLES + R + PE.latency + c, together with the partial sum of the beat issued at t0 (see
        # hw/accel/pe.py).
        ctrl_layout = data.StructLayout({"v": 1, "first": 1, "last": 1, "nt": len(i.p.nt),
                                         "bank": len(i.p.bank)})
        ctrl = Signal(ctrl_layout, name=f"ctrl_l{lane}")
        m.d.comb += [
            ctrl.v.eq(i.valid),
            ctrl.first.eq(i.p.kt == 0),
            ctrl.last.eq(i.p.kt == KT - 1),
            ctrl.nt.eq(i.p.nt),
            ctrl.bank.eq(i.p.bank),
        ]
        col_ctrl = []
        pl = ProcessingElement.latency + self.ISSUE_CYCLES
        for d in range(R + pl + C - 1):
            nxt = Signal(ctrl_layout, name=f"ctrl_l{lane}_d{d + 1}")
            m.d.sync += nxt.eq(ctrl)
            ctrl = nxt
            if d >= R + pl - 1:
                col_ctrl.append(ctrl)
        assert len(col_ctrl) == C
        # Column accumulators, then de-skew so that all columns leave together.
        # Column c finishes at t0 + ISSUE_CYCLES + R + PE.latency + 1 + c and waits C - 1 - c cycles.
        for c in range(C):
            cc = col_ctrl[c]
            acc = Signal(signed(quant.ACC_BITS), name=f"acc_l{lane}_{c}")
            done = Signal(name=f"done_l{lane}_{c}")
            s = pes[R - 1][c].s_o[lane]
            with m.If(cc.v):
                m.d.sync += acc.eq(Mux(cc.first, 0, acc) + s)
            m.d.sync += done.eq(cc.v & cc.last)
            out = acc
            for d in range(C - 1 - c):
                od = Signal(signed(quant.ACC_BITS), name=f"deskew_l{lane}_{c}_{d}")
                m.d.sync += od.eq(out)
                out = od
            m.d.comb += o.p.acc[c].eq(out)
            if c == C - 1:
                # o.valid, nt and bank are registered from the last column's control, in step
                # with its acc.
                m.d.comb += o.valid.eq(done)
                m.d.sync += [o.p.nt.eq(cc.nt), o.p.bank.eq(cc.bank)]
