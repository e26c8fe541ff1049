"""DRS dispatcher: cuts each computed row into hidden chunks and hands them to free cores (or by
chunk round-robin, or row-static, the schedules DRS is measured against)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.layouts import job_meta_layout
from hw.lib.widths import index_bits

__all__ = ["Dispatcher", "row_job_layout"]


def row_job_layout(layers, tag_bits):
    """A row to compute: its layer and tag (the row's place in its group). The row's ``x`` is not
    carried: it stays in the accelerator's row buffer, which each core reads at its job's tag, so
    that no register row of ``8 * d_model`` bits is enabled by the dispatcher's handshake."""
    return data.StructLayout({
        "layer": index_bits(layers),
        "tag": tag_bits,
    })


class Dispatcher(wiring.Component):
    """Dynamic Resource Scheduling: each row's ``chunks`` hidden chunks go to whichever core is free.

    - **DRS** (``static = 0``): one row is held at a time (a copy in every holder, so that each
      core's job fields come from its own holder in every mode) and its chunks ``0 .. chunks-1`` go, one
      per cycle at most, each to the lowest-numbered core that can take a job in that cycle. No
      core idles while a chunk is waiting, so even a group with a single computed row keeps every
      core busy. The next row is taken in the cycle after its predecessor's last chunk leaves:
      ``i.ready`` is the holder's ``~busy`` flop, so no core's ready reaches the input handshake
      (the cores hold a job ahead, so the cycle costs no core a cycle: the cycle model agrees).
    - **chunk round-robin** (``static = 0``, ``chunk_rr = 1``): the DRS holder, but chunk ``j`` of
      every row goes to core ``j mod cores``, in chunk order; the dispatcher waits for that core
      (no scheduler), the fair baseline without dynamic scheduling.
    - **static** (``static = 1``, ``chunk_rr`` ignored): every chunk of the row with tag ``b`` goes to core
      ``b mod cores``, the assignment FastCar's dynamic scheduling is compared against. Each core
      has its own holding register, so a row waiting for its core does not hold up another core's
      row; a core whose rows were replayed idles.

    In DRS and chunk round-robin mode ``o[p].valid`` is raised only together with ``o[p].ready``
    (the choice looks at which cores are ready), so every raised ``valid`` is a transfer; in
    static mode ``valid`` is held until the core takes the chunk.

    A job is a few bits (layer, chunk, tag): the row's ``x`` stays in the accelerator's row buffer,
    so the ready/valid chain through the scheduler ends on a few flip-flops' enables.

    Parameters
    ----------
    layers, chunks, cores, tag_bits : int

    Members
    -------
    i : In(stream.Signature(row_job_layout(layers, tag_bits)))
    o : Out(stream.Signature(hw.accel.layouts.job_meta_layout(layers, chunks, tag_bits))).array(cores)
    static : In(1)
        Static assignment instead of DRS (configuration; change it only while idle).
    chunk_rr : In(1)
        Chunk round-robin instead of DRS when ``static`` is 0 (configuration; change it only
        while idle).
    """

    def __init__(self, *, layers, chunks, cores, tag_bits):
        for name, v in (("chunks", chunks), ("cores", cores)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Dispatcher {name} must be a positive integer, not {v!r}")
        self._chunks, self._cores = chunks, cores
        super().__init__({
            "i": In(stream.Signature(row_job_layout(layers, tag_bits))),
            "o": Out(stream.Signature(job_meta_layout(layers, chunks, tag_bits))).array(cores),
            "static": In(1),
            "chunk_rr": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        S, P = self._chunks, self._cores
        # Holding register h: the one DRS row (h = 0), or core h's row (static).
        held = [Signal.like(self.i.p, name=f"held_{h}") for h in range(P)]
        busy = [Signal(name=f"busy_{h}") for h in range(P)]
        chunk = [Signal(range(max(2, S)), name=f"chunk_{h}") for h in range(P)]
        sent = [Signal(name=f"sent_{h}") for h in range(P)]         # holder h handed out a chunk
        last = [Signal(name=f"last_{h}") for h in range(P)]
        for h in range(P):
            m.d.comb += last[h].eq(sent[h] & (chunk[h] == S - 1))

        # DRS: holder 0 to the lowest-numbered ready core; chunk round-robin: to core chunk mod P,
        # once it is ready.
        target = Signal(range(max(2, P)))
        can = Signal()
        with m.If(self.chunk_rr):
            m.d.comb += [target.eq(chunk[0] % P),
                         can.eq(Array(self.o[p].ready for p in range(P))[target])]
        with m.Else():
            for p in reversed(range(P)):
                with m.If(self.o[p].ready):
                    m.d.comb += [target.eq(p), can.eq(1)]
        for p in range(P):
            o = self.o[p]
            with m.If(self.static):
                m.d.comb += [o.valid.eq(busy[p]), sent[p].eq(busy[p] & o.ready)]
            with m.Else():
                m.d.comb += o.valid.eq(busy[0] & can & (target == p))
                with m.If(o.valid & o.ready):
                    m.d.comb += sent[0].eq(1)
            # Each core's layer and tag come from its own holder in every mode (a DRS row is
            # copied into every holder), so that ``static`` does not select the tag with which
            # the core reads its row's x.
            m.d.comb += [o.p.layer.eq(held[p].layer), o.p.tag.eq(held[p].tag),
                         o.p.chunk.eq(Mux(self.static, chunk[p], chunk[0]))]

        # Which holder takes the incoming row.
        dest = Signal(range(max(2, P)))
        m.d.comb += dest.eq(Mux(self.static, self.i.p.tag % P, 0))
        free = Signal()
        with m.Switch(dest):
            for h in range(P):
                with m.Case(h):
                    m.d.comb += free.eq(~busy[h])
        m.d.comb += self.i.ready.eq(free)
        for h in range(P):
            with m.If(sent[h]):
                m.d.sync += chunk[h].eq(Mux(last[h], 0, chunk[h] + 1))
                with m.If(last[h]):
                    m.d.sync += busy[h].eq(0)
            took = self.i.valid & self.i.ready
            with m.If(took & ((dest == h) | ~self.static)):
                m.d.sync += held[h].eq(self.i.p)
            with m.If(took & (dest == h)):
                m.d.sync += [busy[h].eq(1), chunk[h].eq(0)]
        return m
