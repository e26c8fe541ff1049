"""Register slice (skid buffer): cuts the valid/ready paths of a stream at a block boundary."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Register slice for an :mod:`amaranth.lib.stream`: passes every beat from ``i`` to ``o`` in
    order, with no loss, duplication or bubble, and puts a flip-flop on the paths that ``mode``
    names, so that no valid/ready chain runs combinationally through it.

    ``mode="full"`` (the default) is the classic two-entry skid buffer. ``o.valid``, ``o.payload``
    and ``i.ready`` are flip-flop outputs: there is no combinational path from ``i.valid`` or
    ``i.payload`` to ``o``, nor from ``o.ready`` to ``i.ready``. A beat accepted on ``i`` in one
    cycle is on ``o`` in the next (latency 1), and with ``o.ready`` held high the slice takes and
    gives one beat per cycle. The main register feeds ``o``; the skid register catches the one
    beat that arrives in the cycle ``o.ready`` falls (``i.ready`` only drops a cycle later), and
    goes out next, ahead of anything new.

    ``mode="forward"`` registers only ``o.valid`` and ``o.payload`` (latency 1, full throughput);
    ``i.ready = o.ready | ~o.valid`` stays combinational. For paths where only the forward
    direction is long.

    ``mode="backward"`` registers only ``i.ready`` (latency 0, full throughput): ``o.valid`` and
    ``o.payload`` come from ``i`` through a multiplexer, or from the skid register while it holds
    the beat that arrived as ``o.ready`` fell.

    Cost for a payload of ``W`` bits, from ``synth_ecp5`` (for ``W = 768``: 1538 FFs and 772 LUT4s
    in ``full``, 769 and 1 in ``forward``, 769 and 770 in ``backward``). The payload registers have
    no reset; only ``main_valid`` and ``skid_empty`` (which is ``i.ready``) do.

    ============  ============  =========  ===============================================
    mode          FFs           LUT4s      clock enable of the payload registers
    ============  ============  =========  ===============================================
    ``full``      ``2 W + 2``   ``W + 4``  main: ``o.ready | ~o.valid`` (one LUT, fan-out
                                           ``W + 1``); skid: none
    ``forward``   ``W + 1``     ``1``      ``o.ready | ~o.valid`` (one LUT, fan-out ``W + 1``)
    ``backward``  ``W + 1``     ``W + 2``  skid: none
    ============  ============  =========  ===============================================

    The ``W`` LUTs are one 2:1 multiplexer per bit, ``Mux(skid_empty, i.payload, skid)``, selected
    by the ``i.ready`` flip-flop. In ``full`` mode the same LUT feeds both the main register and
    the skid register: the skid register loads ``i.payload`` in every cycle it is empty and holds
    otherwise, which is that multiplexer, so it needs no clock enable. The main register's enable
    depends on ``o.ready`` by nature (it must hold a beat that waits); at ``W`` in the thousands,
    split the slice into narrower ones so that each enable drives fewer flip-flops.

    Parameters
    ----------
    shape : shape-castable
        Payload of one beat, e.g. a ``data.StructLayout`` several hundred bits wide.
    mode : str
        ``"full"``, ``"forward"`` or ``"backward"``: which directions are registered.

    Members
    -------
    i : In(stream.Signature(shape))
        Beats in.
    o : Out(stream.Signature(shape))
        The same beats, in the same order.
    """

    MODES = ("full", "forward", "backward")

    def __init__(self, shape, *, mode="full"):
        if mode not in self.MODES:
            raise ValueError(f"SkidBuffer mode must be one of {', '.join(map(repr, self.MODES))}, "
                             f"not {mode!r}")
        self._shape, self._mode = shape, mode
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    @property
    def shape(self):
        return self._shape

    @property
    def mode(self):
        return self._mode

    @property
    def latency(self) -> int:
        """Cycles from a beat taken on ``i`` to the same beat on ``o``: 0 in ``backward``, else 1."""
        return 0 if self._mode == "backward" else 1

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        i_bits, o_bits = Value.cast(i.payload), Value.cast(o.payload)

        if self._mode == "forward":
            valid = Signal(name="main_valid")
            main = Signal(len(i_bits), name="main", reset_less=True)
            m.d.comb += [
                i.ready.eq(o.ready | ~valid),
                o.valid.eq(valid),
                o_bits.eq(main),
            ]
            with m.If(i.ready):
                m.d.sync += [valid.eq(i.valid), main.eq(i_bits)]
            return m

        # Both other modes: a skid register that is empty exactly when i.ready is high. While
        # empty it loads i.payload in every cycle; a beat it caught counts only once i.ready falls.
        empty = Signal(init=1, name="skid_empty")
        skid = Signal(len(i_bits), name="skid", reset_less=True)
        m.d.comb += i.ready.eq(empty)
        with m.If(empty):
            m.d.sync += skid.eq(i_bits)

        if self._mode == "backward":
            m.d.comb += [
                o.valid.eq(i.valid | ~empty),
                o_bits.eq(Mux(empty, i_bits, skid)),
            ]
            with m.If(empty):
                # A beat taken while o is stalled stays in the skid register.
                with m.If(i.valid & ~o.ready):
                    m.d.sync += empty.eq(0)
            with m.Elif(o.ready):
                m.d.sync += empty.eq(1)
            return m

        # full: the main register drives o; the skid register is only ever full while the main
        # register is full and stalled, and empties into it when o.ready returns.
        valid = Signal(name="main_valid")
        main = Signal(len(i_bits), name="main", reset_less=True)
        m.d.comb += [o.valid.eq(valid), o_bits.eq(main)]
        with m.If(o.ready | ~valid):
            m.d.sync += [
                valid.eq(i.valid | ~empty),
                main.eq(Mux(empty, i_bits, skid)),
                empty.eq(1),
            ]
        with m.Elif(empty & i.valid):
            m.d.sync += empty.eq(0)
        return m
