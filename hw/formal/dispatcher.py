"""The DRS dispatcher conserves work: every row offered goes out as chunks ``0 .. chunks-1``,
each exactly once, with the row's payload, in DRS, chunk round-robin and static mode."""

from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.accel.dispatcher import Dispatcher
from hw.formal.harness import Internals, PropertyWrapper, in_ports, stream_hold

__all__ = ["DispatcherWork"]


class DispatcherWork(PropertyWrapper):
    """Scoreboard of a :class:`hw.accel.dispatcher.Dispatcher` in one scheduling mode.

    The wrapper keeps, per holder (the one DRS row, or core ``p``'s row in static mode), a copy of
    the row last accepted, the number of its chunks still owed and the chunk expected next, and
    checks in every cycle:

    - **no duplicates, no invented chunks**: a chunk goes out only while one is owed, it is the
      next chunk number, and it carries the held row's ``layer`` and ``tag``;
    - **no drops**: a row is accepted only once every chunk of the previous row of its holder
      has gone out (in an earlier cycle), so at most ``chunks`` are ever owed;
    - **static**: chunks of the row with tag ``b`` go to core ``b mod cores`` only (whatever
      ``chunk_rr`` is); **DRS** and **chunk round-robin**: at most one chunk per cycle;
      **chunk round-robin**: chunk ``j`` goes to core ``j mod cores`` only;
    - **no idling**: an owed chunk goes out in any cycle in which a core that may take it is
      ready (in chunk round-robin only core ``j mod cores`` may), and a holder with nothing owed
      accepts a row offered to it.

    With the input stream holding its beats until taken and ``static`` constant; ``chunk_rr`` is
    constant (1 in chunk round-robin mode, 0 in DRS mode, free in static mode).

    For the unbounded proof (``invariants=True``) it also asserts how the dispatcher's registers
    mirror the scoreboard: holder ``h`` is busy exactly while chunks are owed, its chunk counter
    is the next chunk, its register holds the row (and in DRS mode the other holders stay idle).

    Parameters
    ----------
    static : bool
        Static mode checked.
    chunk_rr : bool
        With ``static`` False: chunk round-robin instead of DRS.
    layers, chunks, cores, tag_bits : int
        Dispatcher parameters.
    dut_class : type
        The dispatcher's class (a planted-bug copy in the failing twin tests).
    invariants : bool
        Also assert the invariants over the internal registers (``busy_<h>``, ``chunk_<h>``,
        ``held_<h>``).
    """

    def __init__(self, *, static, chunk_rr=False, layers=2, chunks=3, cores=3, tag_bits=2,
                 dut_class=Dispatcher, invariants=True):
        super().__init__()
        if static and chunk_rr:
            raise ValueError("DispatcherWork: chunk_rr is a DRS-holder mode; static must be False")
        self.static, self.chunk_rr, self.chunks, self.cores = bool(static), bool(chunk_rr), chunks, cores
        self.invariants = invariants
        self.dut = dut_class(layers=layers, chunks=chunks, cores=cores, tag_bits=tag_bits)
        self.free(*in_ports(self.dut))

    def elaborate(self, platform):
        m = self.module()
        dut = self.dut
        body = Internals(dut, platform)
        m.submodules.dut = body.fragment
        S, P = self.chunks, self.cores
        m.d.comb += Assume(dut.static == int(self.static), "scheduling mode")
        if self.static:
            self.constant(m, dut.chunk_rr, name="chunk_rr")
        else:
            m.d.comb += Assume(dut.chunk_rr == int(self.chunk_rr), "DRS or chunk round-robin")
        stream_hold(m, dut.i, name="i", assume=True)

        took = dut.i.valid & dut.i.ready
        fires = [dut.o[p].valid & dut.o[p].ready for p in range(P)]
        holders = P if self.static else 1
        for h in range(holders):
            mine = (dut.i.p.tag % P == h) if self.static else C(1)
            cores = [h] if self.static else list(range(P))
            row = Signal.like(dut.i.p, name=f"row_{h}")
            owed = Signal(range(2 * S + 2), name=f"owed_{h}")
            nxt = Signal(range(max(2, S)), name=f"next_chunk_{h}")
            fire = Signal(range(P + 1), name=f"fired_{h}")
            m.d.comb += fire.eq(sum(fires[p] for p in cores))

            m.d.comb += Assert(fire <= 1, "at most one chunk of a row per cycle")
            m.d.comb += Assert(owed <= S, "no more chunks owed than a row has (no row dropped)")
            for p in cores:
                o = dut.o[p]
                with m.If(fires[p]):
                    m.d.comb += [
                        Assert(owed != 0, "a chunk goes out only while one is owed (no duplicate)"),
                        Assert(o.p.chunk == nxt, "chunks go out in order, each once"),
                        Assert((o.p.layer == row.layer) & (o.p.tag == row.tag),
                               "a chunk carries its row's layer and tag"),
                    ]
                    if self.chunk_rr:
                        m.d.comb += Assert(nxt % P == p, "chunk-RR: chunk j goes to core j mod cores")
            with m.If(took & mine):
                m.d.comb += Assert(owed == 0, "a row is accepted only when its holder is empty")
            # No idling.
            if self.chunk_rr:
                ready = Array(dut.o[p].ready for p in cores)[nxt % P]
            else:
                ready = Cat(dut.o[p].ready for p in cores).any()
            with m.If((owed != 0) & ready):
                m.d.comb += Assert(fire != 0, "an owed chunk goes out when a core is ready")
            with m.If(dut.i.valid & mine & (owed == 0)):
                m.d.comb += Assert(dut.i.ready, "an empty holder takes the row offered to it")

            m.d.sync += owed.eq(owed - fire + Mux(took & mine, S, 0))
            with m.If(fire != 0):
                m.d.sync += nxt.eq(Mux(nxt == S - 1, 0, nxt + 1))
            with m.If(took & mine):
                m.d.sync += row.eq(dut.i.p)
            ended = Signal(name=f"ended_{h}")          # the row's last chunk left last cycle
            m.d.sync += ended.eq((owed == 1) & (fire == 1))
            if h == holders - 1:
                self.cover(m, took & mine & ended,
                           f"holder {h}: a row arrives the cycle after its predecessor's last chunk")
                self.cover(m, fires[P - 1], f"core {P - 1} takes a chunk")
            if self.invariants:
                busy, chunk, held = body[f"busy_{h}"], body[f"chunk_{h}"], body[f"held_{h}"]
                m.d.comb += [
                    Assert(busy == (owed != 0), f"holder {h} busy exactly while chunks are owed"),
                    Assert(chunk == nxt, f"holder {h}'s chunk counter is the next chunk"),
                ]
                with m.If(busy):
                    m.d.comb += [
                        Assert(owed == S - chunk, f"holder {h} owes the chunks from its counter on"),
                        Assert(Value.cast(held) == Value.cast(row), f"holder {h} holds the accepted row"),
                    ]
                with m.Else():
                    m.d.comb += Assert(chunk == 0, f"idle holder {h} starts at chunk 0")
        if self.invariants and not self.static:
            for h in range(1, P):
                m.d.comb += [
                    Assert(~body[f"busy_{h}"], f"DRS: holder {h} stays idle"),
                    Assert(Value.cast(body[f"held_{h}"]) == Value.cast(body["held_0"]),
                           f"DRS: holder {h} holds a copy of holder 0's row"),
                ]
        return m
