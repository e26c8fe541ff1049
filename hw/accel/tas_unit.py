"""TAS comparator: integer temporal attention score, replay rule and drift guard, one row at a time."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.mult18 import Mult18
from hw.lib.widths import index_bits, mul_const
from sw.golden import quant

__all__ = ["TasUnit", "row_layout", "decision_layout", "pipeline_cycles"]

#: Width of the threshold: int32 plus the out-of-range values 2**31 ("never") and -2**31 ("always").
THRESHOLD_BITS = quant.ACC_BITS + 2



def row_layout(dim, layers, tokens_per_frame, batch, frame_bits=8):
    """One row of one group: ``q`` and ``k_prev`` (``dim = heads * head_dim`` int8 each), the
    layer's integer threshold and where the row sits (layer, frame, in-frame index, row)."""
    return data.StructLayout({
        "q": data.ArrayLayout(signed(8), dim),
        "k": data.ArrayLayout(signed(8), dim),
        "threshold": signed(THRESHOLD_BITS),
        "layer": index_bits(layers),
        "frame": frame_bits,
        "index": index_bits(tokens_per_frame),
        "row": index_bits(batch),
    })


def _tree_levels(lanes: int) -> int:
    return max(0, (lanes - 1).bit_length())


def pipeline_cycles(lanes: int) -> int:
    """Cycles between the TAS unit's last dot-product step and its decision, beyond the one cycle
    of an unpipelined accumulator: the multiplier's two registers and one register per level of
    the adder tree over ``lanes`` products (``sw.perf.cycles.t_row`` adds them to every row)."""
    return Mult18.latency + _tree_levels(lanes)


def decision_layout():
    return data.StructLayout({"tas": signed(quant.ACC_BITS), "replay": 1})


class TasUnit(wiring.Component):
    """Integer TAS and the replay decision, bit-exact with the software (``sw/model/decoder.py`` with
    ``sw.golden.calibrate.IntegerPath``).

    For each row: ``tas = sum_e q[e] * k_prev[e]`` (:func:`sw.golden.quant.tas_int`), computed ``lanes``
    products per cycle in registered multipliers (:class:`hw.lib.mult18.Mult18`), summed by an adder
    tree with a register after every level and accumulated; the decision follows
    :func:`pipeline_cycles` after the last step. Then::

        want    = frame != 0 and tas >= threshold
        force   = refresh (frame % refresh_every == 0, when enabled)
                  or chain[layer, index, row] >= max_chain (when enabled)
        replay  = want and not force
        chain   = replay ? chain + 1 : 0        (frames >= 1, when max_chain is enabled)

    ``frame % refresh_every`` is kept as a phase counter that advances when the frame number
    changes, so rows must arrive in decode order (frame after frame), as groups do.

    Parameters
    ----------
    dim : int
        ``heads * head_dim``.
    layers, tokens_per_frame, batch : int
        Size of the chain-counter memory (one counter per layer, in-frame position and row).
    lanes : int
        Products per cycle; ``dim`` must be a multiple.

    Members
    -------
    i : In(stream.Signature(row_layout(...)))
    o : Out(stream.Signature(decision_layout()))
    refresh_en, refresh_every, max_chain_en, max_chain : In
        Drift-guard configuration (static while rows flow).
    """

    def __init__(self, dim, layers, tokens_per_frame, batch, *, lanes=8, frame_bits=8, chain_bits=8):
        if dim % lanes:
            raise ValueError(f"TasUnit: dim={dim} is not a multiple of lanes={lanes}")
        quant.check_accumulator(dim, what="TAS dim")
        self._dim, self._lanes = dim, lanes
        self._layers, self._n, self._batch = layers, tokens_per_frame, batch
        self._chain_bits = chain_bits
        super().__init__({
            "i": In(stream.Signature(row_layout(dim, layers, tokens_per_frame, batch, frame_bits))),
            "o": Out(stream.Signature(decision_layout())),
            "refresh_en": In(1), "refresh_every": In(frame_bits),
            "max_chain_en": In(1), "max_chain": In(chain_bits),
        })

    def elaborate(self, platform):
        m = Module()
        D, P = self._dim, self._lanes
        steps = D // P
        depth = self._layers * self._n * self._batch
        m.submodules.chain = chain = memory.Memory(shape=unsigned(self._chain_bits), depth=depth, init=[])
        cw = chain.write_port()
        cr = chain.read_port(domain="sync")

        row = Signal.like(self.i.p)
        acc = Signal(signed(quant.ACC_BITS))
        step = Signal(range(steps + 1))
        addr = Signal(range(depth))
        phase = Signal.like(self.refresh_every)
        last_frame = Signal.like(self.i.p.frame)
        seen = Signal()

        # Datapath: operands of step `step` -> Mult18 (2 registers) -> adder tree (a register per
        # level) -> accumulator. `issue` marks a step entering the multipliers; its mark travels
        # with the sums, so the accumulator adds exactly the products of this row's steps.
        issue = Signal()
        products = []
        for j in range(P):
            mul = Mult18(8, 8)
            m.submodules[f"mul_{j}"] = mul
            with m.Switch(step):
                for s_ in range(steps):
                    with m.Case(s_):
                        m.d.comb += [mul.a.eq(row.q[s_ * P + j]), mul.b.eq(row.k[s_ * P + j])]
            products.append(mul.p)
        marks = Signal(Mult18.latency + _tree_levels(P))
        m.d.sync += marks.eq(Cat(issue, marks[:-1]))
        level = products
        for lv in range(_tree_levels(P)):
            nxt = []
            for k in range(0, len(level), 2):
                width = len(products[0]) + lv + 1
                reg = Signal(signed(width), name=f"sum_{lv}_{k // 2}")
                m.d.sync += reg.eq(level[k] + level[k + 1] if k + 1 < len(level) else level[k])
                nxt.append(reg)
            level = nxt
        partial = level[0]
        partial_valid = marks[-1]

        with m.If(partial_valid):
            m.d.sync += acc.eq(acc + partial)

        m.d.comb += cr.addr.eq(addr)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += [row.eq(self.i.p), acc.eq(0), step.eq(0)]
                    pos = mul_const(self.i.p.layer, self._n) + self.i.p.index
                    m.d.sync += addr.eq(mul_const(pos, self._batch) + self.i.p.row)
                    # frame % refresh_every as a phase that advances with the frame number.
                    with m.If(self.i.p.frame == 0):
                        m.d.sync += phase.eq(0)
                    with m.Elif(~seen | (self.i.p.frame != last_frame)):
                        m.d.sync += phase.eq(Mux(phase + 1 >= self.refresh_every, 0, phase + 1))
                    m.d.sync += [last_frame.eq(self.i.p.frame), seen.eq(1)]
                    m.next = "DOT"
            with m.State("DOT"):
                m.d.comb += issue.eq(1)
                m.d.sync += step.eq(step + 1)
                with m.If(step == steps - 1):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                # The last step's sum enters the accumulator: next cycle it holds the row's TAS.
                with m.If(partial_valid & ~marks[:-1].any()):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                # The chain counter read (addressed since IDLE) is valid here.
                want = (row.frame != 0) & (acc >= row.threshold)
                force = ((self.refresh_en & (phase == 0)) |
                         (self.max_chain_en & (cr.data >= self.max_chain)))
                replay = Signal()
                m.d.comb += replay.eq(want & ~force)
                # Frame 0 (never a replay) writes 0, so every counter starts clean with the video,
                # whatever an earlier run left in the memory.
                with m.If(self.max_chain_en):
                    m.d.comb += [cw.en.eq(1), cw.addr.eq(addr), cw.data.eq(Mux(replay, cr.data + 1, 0))]
                m.d.sync += [self.o.valid.eq(1), self.o.p.tas.eq(acc), self.o.p.replay.eq(replay)]
                m.next = "OUT"
            with m.State("OUT"):
                with m.If(self.o.ready):
                    m.d.sync += self.o.valid.eq(0)
                    m.next = "IDLE"
        return m
