"""A step's rows held and run against streamed weight blocks on the MAC unit."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.widths import index_bits
from hw.step.projection import projection_in_layout
from sw.spec import quant

__all__ = ["RowRuns", "element_layout", "weight_layout", "block_report_layout"]


def element_layout():
    """One int8 element of a row (RMSNorm's output, or a row of the attention's), ``last`` on a row's last."""
    return data.StructLayout({"data": data.StructLayout({"y": signed(8)}), "last": 1})


def weight_layout(n_in, n_out):
    """One beat of a weight block: the ``n_in x n_out`` weights that meet ``n_in`` elements of a row
    (``w[n * n_in + k]`` for input ``k`` and output ``n``, as
    :func:`hw.step.projection.projection_in_layout`), and, read on the block's last beat, its
    ``n_out`` outputs' constants."""
    return data.StructLayout({
        "w": data.ArrayLayout(signed(8), n_in * n_out),
        "mult": data.ArrayLayout(unsigned(quant.MULT_BITS), n_out),
        "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), n_out)})


def block_report_layout(n_out, groups, blocks):
    """A weight block taken: its constants, its group and its index."""
    return data.StructLayout({"mult": data.ArrayLayout(unsigned(quant.MULT_BITS), n_out),
                              "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), n_out),
                              "group": index_bits(groups), "block": index_bits(blocks)})


class RowRuns(wiring.Component):
    """Holds a step's rows and runs each weight block against the rows that need it, the block
    taken once from ``w`` and replayed from a one-block buffer for the others: the sequencing of
    :class:`hw.step.projection.Projection` that the q/k/v and o projections and the LM head share.

    Rows arrive on ``i``, ``n_in`` elements a word into a row buffer. Once ``groups * repeat`` rows
    are in, the runs go out on ``o`` (a projection's input, ``d / n_in`` beats a run)::

        for g in range(groups):
            for j in range(blocks):              # weight block j of group g, taken from w once
                for t in range(repeat):
                    run row g + groups * t against it

    and the next step's rows are taken once the last run has gone out. With ``report``, ``k``
    gives each block's constants, group and index as its first run ends (for a consumer that
    needs them after the projection, such as the sampler).

    Parameters
    ----------
    d : int
        Elements of a row; a multiple of ``n_in``.
    n_in, n_out : int
        The MAC unit's geometry.
    groups, blocks, max_repeat : int
        The loop above; ``max_repeat`` bounds ``repeat``.
    report : bool
        Build ``k``.

    Members
    -------
    i : In(stream.Signature(element_layout()))
    w : In(stream.Signature(weight_layout(n_in, n_out)))
    o : Out(stream.Signature(projection_in_layout(n_in, n_out)))
        ``end`` on the last run of a block.
    k : Out(stream.Signature(block_report_layout(n_out, groups, blocks)))
        With ``report`` only.
    repeat : In(range(1, max_repeat + 1))
        Rows per group (static while a step runs).
    """

    def __init__(self, d, n_in, n_out, *, groups, blocks, max_repeat, report=False):
        for name, v in (("d", d), ("n_in", n_in), ("n_out", n_out), ("groups", groups), ("blocks", blocks),
                        ("max_repeat", max_repeat)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"RowRuns {name} must be a positive integer, not {v!r}")
        if d % n_in:
            raise ValueError(f"RowRuns n_in ({n_in}) must divide d ({d})")
        self._d, self._ni, self._no = d, n_in, n_out
        self._groups, self._blocks, self._max = groups, blocks, max_repeat
        self._report = bool(report)
        members = {
            "i": In(stream.Signature(element_layout())),
            "w": In(stream.Signature(weight_layout(n_in, n_out))),
            "o": Out(stream.Signature(projection_in_layout(n_in, n_out))),
            "repeat": In(range(1, max_repeat + 1)),
        }
        if report:
            members["k"] = Out(stream.Signature(block_report_layout(n_out, groups, blocks)))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        NI, NO, G, NB, T = self._ni, self._no, self._groups, self._blocks, self._max
        K = self._d // NI
        R = G * T

        # ---- the rows into the row buffer, n_in elements a word ----------------------------------------
        m.submodules.xbuf = xbuf = memory.Memory(shape=data.ArrayLayout(signed(8), NI), depth=R * K, init=[])
        xw, xr = xbuf.write_port(), xbuf.read_port(domain="comb")
        rows = Signal(range(R + 1))
        m.d.comb += rows.eq(G * self.repeat)
        busy = Signal()                               # the rows are in: the runs go out
        gather = Signal(8 * NI)
        elem = Signal(range(NI))
        row_in = Signal(range(R + 1))
        m.d.comb += self.i.ready.eq(~busy)
        with m.If(self.i.valid & self.i.ready):
            full = Cat(gather[8:], self.i.p.data.y)
            m.d.sync += [gather.eq(full), elem.eq(Mux(elem == NI - 1, 0, elem + 1))]
            m.d.comb += [xw.en.eq(elem == NI - 1), xw.data.eq(full)]
            with m.If(elem == NI - 1):
                m.d.sync += xw.addr.eq(xw.addr + 1)
            with m.If(self.i.p.last):
                m.d.sync += row_in.eq(row_in + 1)
                with m.If(row_in + 1 == rows):
                    m.d.sync += busy.eq(1)

        # ---- the runs ------------------------------------------------------------------------------
        m.submodules.wbuf = wbuf = memory.Memory(shape=data.ArrayLayout(signed(8), NI * NO), depth=K, init=[])
        ww, wr = wbuf.write_port(), wbuf.read_port(domain="comb")
        g = Signal(range(G))
        j = Signal(range(NB))
        t = Signal(range(T))
        k = Signal(range(K))
        m.d.comb += [xr.addr.eq((g + G * t) * K + k), wr.addr.eq(k)]
        first = t == 0                                # the block's weights come from w
        report_ok = Const(1) if not self._report else (self.k.ready | ~first)
        take = Signal()
        last_run = t == self.repeat - 1
        keep = Signal(weight_layout(NI, NO))          # the block's constants, for the runs after the first
        consts = Signal(weight_layout(NI, NO))
        m.d.comb += consts.eq(Mux(first, self.w.p, keep))
        m.d.comb += [
            self.o.valid.eq(busy & (~first | self.w.valid) & report_ok),
            self.w.ready.eq(busy & first & self.o.ready & report_ok),
            take.eq(self.o.valid & self.o.ready),
            self.o.p.data.x.eq(xr.data),
            self.o.p.data.w.eq(Mux(first, self.w.p.w, wr.data)),
            self.o.p.data.mult.eq(consts.mult), self.o.p.data.shift.eq(consts.shift),
            self.o.p.data.end.eq(last_run),
            self.o.p.last.eq(k == K - 1),
            ww.addr.eq(k), ww.data.eq(self.w.p.w), ww.en.eq(take & first),
        ]
        with m.If(take & first & (k == K - 1)):
            m.d.sync += [keep.mult.eq(self.w.p.mult), keep.shift.eq(self.w.p.shift)]
        if self._report:
            m.d.comb += [self.k.valid.eq(busy & first & self.w.valid & self.o.ready & (k == K - 1)),
                         self.k.p.mult.eq(self.w.p.mult), self.k.p.shift.eq(self.w.p.shift),
                         self.k.p.group.eq(g), self.k.p.block.eq(j)]
        with m.If(take):
            m.d.sync += k.eq(Mux(k == K - 1, 0, k + 1))
            with m.If(k == K - 1):
                with m.If(~last_run):
                    m.d.sync += t.eq(t + 1)
                with m.Else():
                    m.d.sync += [t.eq(0), j.eq(Mux(j == NB - 1, 0, j + 1))]
                    with m.If(j == NB - 1):
                        m.d.sync += g.eq(Mux(g == G - 1, 0, g + 1))
                        with m.If(g == G - 1):            # the step's last run: take the next rows
                            m.d.sync += [busy.eq(0), row_in.eq(0), xw.addr.eq(0)]
        return m
