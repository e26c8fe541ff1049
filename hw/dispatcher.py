"""DRS dispatcher: cuts each computed row into hidden chunks and hands them to free cores."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.mlp_core import job_layout
from hw.widths import index_bits

__all__ = ["Dispatcher", "row_job_layout"]


def row_job_layout(d_model, layers, tag_bits):
    """A row to compute: MLP input ``x``, layer and tag (the row's place in its group)."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), d_model),
        "layer": index_bits(layers),
        "tag": tag_bits,
    })


class Dispatcher(wiring.Component):
    """Dynamic Resource Scheduling: each row's ``chunks`` hidden chunks go to whichever core is free.

    A row is held while its chunks ``0 .. chunks-1`` are handed out, one per cycle at most:

    - **DRS** (``static = 0``): chunk ``j`` goes to the lowest-numbered core that can take a job
      in this cycle. No core idles while a chunk is waiting, so even a group with a single
      computed row keeps every core busy.
    - **static** (``static = 1``): every chunk of the row with tag ``b`` goes to core
      ``b mod cores`` (the assignment FastCar's dynamic scheduling is compared against); the
      other cores idle when that row's partners were replayed.

    In DRS mode ``o[p].valid`` is raised only together with ``o[p].ready`` (the choice looks at
    which cores are ready), so every raised ``valid`` is a transfer; in static mode ``valid`` is
    held until the chosen core takes the chunk.

    Parameters
    ----------
    d_model, layers, chunks, cores, tag_bits : int

    Members
    -------
    i : In(stream.Signature(row_job_layout(d_model, layers, tag_bits)))
    o : Out(stream.Signature(job_layout(d_model, layers, chunks, tag_bits))).array(cores)
    static : In(1)
        Static assignment instead of DRS (configuration; change it only between groups).
    """

    def __init__(self, d_model, *, layers, chunks, cores, tag_bits):
        for name, v in (("chunks", chunks), ("cores", cores)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Dispatcher {name} must be a positive integer, not {v!r}")
        self._chunks, self._cores = chunks, cores
        super().__init__({
            "i": In(stream.Signature(row_job_layout(d_model, layers, tag_bits))),
            "o": Out(stream.Signature(job_layout(d_model, layers, chunks, tag_bits))).array(cores),
            "static": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        S, P = self._chunks, self._cores
        held = Signal.like(self.i.p)
        busy = Signal()
        chunk = Signal(range(max(2, S)))
        target = Signal(range(max(2, P)))
        can = Signal()

        with m.If(self.static):
            m.d.comb += [target.eq(held.tag % P), can.eq(1)]
        with m.Else():
            for p in reversed(range(P)):
                with m.If(self.o[p].ready):
                    m.d.comb += [target.eq(p), can.eq(1)]
        sent = Signal()
        for p in range(P):
            o = self.o[p]
            m.d.comb += [
                o.p.x.eq(held.x), o.p.layer.eq(held.layer), o.p.tag.eq(held.tag), o.p.chunk.eq(chunk),
                o.valid.eq(busy & can & (target == p)),
            ]
            with m.If(o.valid & o.ready):
                m.d.comb += sent.eq(1)
        last = sent & (chunk == S - 1)
        m.d.comb += self.i.ready.eq(~busy | last)
        with m.If(sent):
            m.d.sync += chunk.eq(Mux(last, 0, chunk + 1))
            with m.If(last):
                m.d.sync += busy.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [held.eq(self.i.p), busy.eq(1), chunk.eq(0)]
        return m
