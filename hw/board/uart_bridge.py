"""Byte-protocol bridge: commands from a byte stream (a UART) onto a component's streams and status.

The protocol (``docs/board.md`` has the full description and the accelerator's opcodes):

* every command is three bytes, ``op`` and a 16-bit little-endian count ``n``, followed by
  its payload; the host sends the next command only after the answer to this one has ended;
* every answer starts with ``op | 0x80`` and ends with one status byte (:class:`Status`);
* ``INFO`` (0x00) answers a length byte and a constant description; ``RESET`` (0x01) pulses
  ``soft_reset`` and empties the write buffers;
* then one opcode per write stream, per read stream and for the status word, in that order
  (:attr:`UartBridge.opcodes`). A write command carries ``n`` beats; the last of them is the
  stream's ``last``, if it has one, so one command is one packet. A read command returns ``n``
  beats as they come. The status command returns a snapshot of ``status``.

Beats on the wire are little-endian and padded to whole bytes (:class:`Framing`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UartBridge", "Framing", "framing", "assign_opcodes", "Status", "OP_INFO", "OP_RESET",
           "OP_FIRST_STREAM", "RESPONSE", "MAX_COUNT"]

OP_INFO = 0x00
OP_RESET = 0x01
#: Opcode of the first write stream; the others follow (writes, reads, then the status word).
OP_FIRST_STREAM = 0x02
#: An answer starts with the command's opcode with this bit set.
RESPONSE = 0x80
#: Most beats one command can carry (its 16-bit count).
MAX_COUNT = 0xFFFF


class Status(enum.IntFlag):
    """Bits of the status byte that ends every answer: what went wrong since the previous one."""
    OVERRUN = 0x01      # a write beat arrived while the previous one was still waiting: it was lost
    TIMEOUT = 0x02      # a command stalled for ``timeout`` cycles and was abandoned
    BAD_OP = 0x04       # an unknown opcode
    LINE = 0x08         # the receiver saw a framing error or lost a byte


@dataclass(frozen=True)
class Framing:
    """How the beats of one stream travel over the byte link.

    A payload that is a struct of ``data`` with optional ``user`` and ``last`` fields is split into
    them; any other payload is all ``data``.

    * a **write** beat is ``data`` then ``user``, as one little-endian number padded to
      :attr:`write_bytes` bytes; ``last`` is not sent (it is set on a command's final beat);
    * a **read** beat is ``data`` padded to :attr:`data_bytes` bytes, then ``user`` and ``last``
      (``last`` above ``user``) padded to :attr:`tail_bytes` bytes.

    Attributes
    ----------
    data_bits, user_bits : int
        Widths of the fields (``user_bits`` is 0 without a ``user`` field).
    last : bool
        Whether the payload has a ``last`` field.
    """

    data_bits: int
    user_bits: int
    last: bool

    @property
    def write_bytes(self) -> int:
        return max(1, -(-(self.data_bits + self.user_bits) // 8))

    @property
    def data_bytes(self) -> int:
        return max(1, -(-self.data_bits // 8))

    @property
    def tail_bytes(self) -> int:
        return -(-(self.user_bits + int(self.last)) // 8)

    @property
    def read_bytes(self) -> int:
        return self.data_bytes + self.tail_bytes


def _fields(shape):
    """``{"data": width, "user": width?, "last": 1?}`` of a stream payload shape."""
    if isinstance(shape, data.StructLayout):
        names = set(shape.members)
        if "data" in names and names <= {"data", "user", "last"}:
            return {name: Shape.cast(shape.members[name]).width for name in names}
    return {"data": Shape.cast(shape).width}


def framing(signature: stream.Signature) -> Framing:
    """The :class:`Framing` of a stream's payload."""
    if not isinstance(signature, stream.Signature):
        raise TypeError(f"expected a stream.Signature, not {signature!r}")
    f = _fields(signature.members["payload"].shape)
    if f.get("last", 1) != 1:
        raise ValueError(f"the 'last' field of {signature!r} must be one bit wide, not {f['last']}")
    return Framing(f["data"], f.get("user", 0), "last" in f)


def assign_opcodes(writes, reads, status: bool) -> dict[str, int]:
    """Opcodes by command name: ``info``, ``reset``, then the write streams, the read streams and
    ``status`` (if there is a status word), numbered from :data:`OP_FIRST_STREAM` in that order."""
    ops = {"info": OP_INFO, "reset": OP_RESET}
    for n, name in enumerate([*writes, *reads, *(["status"] if status else [])]):
        ops[name] = OP_FIRST_STREAM + n
    if max(ops.values()) >= RESPONSE:
        raise ValueError(f"{len(ops)} commands do not fit below opcode {RESPONSE:#x}")
    return ops


def _split(payload):
    """``(data, user, last)`` values of a stream payload (``user``/``last`` None when absent)."""
    if isinstance(payload, data.View) and isinstance(payload.shape(), data.StructLayout):
        names = set(payload.shape().members)
        if "data" in names and names <= {"data", "user", "last"}:
            return tuple(Value.cast(getattr(payload, n)) if n in names else None
                         for n in ("data", "user", "last"))
    return Value.cast(payload), None, None


class UartBridge(wiring.Component):
    """Serves the byte protocol of this module's docstring between the byte streams ``i`` (from a
    :class:`hw.board.uart_rx.UartRx`) and ``o`` (to a :class:`hw.board.uart_tx.UartTx`) and the streams of a
    component.

    Each write stream has a buffer of one beat besides the receive shift register, so the component
    has a whole beat's time to take a beat before the next one is complete; a beat that finds the
    buffer still full is dropped and reported (:attr:`Status.OVERRUN`). A command that stalls for
    ``timeout`` cycles (the host stopped sending, a read stream gave no beat, a write beat was not
    taken) is abandoned and reported (:attr:`Status.TIMEOUT`), so a host that died in the middle of
    a command cannot leave the bridge out of step for the next one.

    Parameters
    ----------
    writes : dict of str to stream.Signature
        Streams the bridge drives (host to component), in opcode order.
    reads : dict of str to stream.Signature
        Streams the bridge takes (component to host), in opcode order after the writes.
    status_bits : int
        Width of the ``status`` word (0: no status command).
    info : bytes
        Answer of ``INFO`` (at most 255 bytes), e.g. what the component was built for.
    timeout : int or None
        Cycles after which a stalled command is abandoned; None waits forever.

    Members
    -------
    i : In(stream.Signature(8))
        Received bytes.
    o : Out(stream.Signature(8))
        Bytes to send.
    <write name> : Out(writes[name])
    <read name> : In(reads[name])
    status : In(status_bits)
        Only with ``status_bits``; sampled in the cycle the status command is decoded.
    rx_error : In(1)
        Pulse from the receiver: a framing error or a lost byte (:attr:`Status.LINE`).
    soft_reset : Out(1)
        One-cycle pulse on ``RESET``.
    busy : Out(1)
        A command is in progress.
    flags : Out(4)
        The :class:`Status` bits collected since the last status byte.
    """

    def __init__(self, writes: dict, reads: dict, *, status_bits: int = 0, info: bytes = b"",
                 timeout: int | None = None):
        reserved = {"i", "o", "status", "rx_error", "soft_reset", "busy", "flags", "info", "reset"}
        for name, sig in (*writes.items(), *reads.items()):
            if name in reserved or not name.isidentifier():
                raise ValueError(f"stream name {name!r} is reserved or not an identifier")
            if not isinstance(sig, stream.Signature):
                raise TypeError(f"stream {name!r}: expected a stream.Signature, not {sig!r}")
        if set(writes) & set(reads):
            raise ValueError(f"streams {sorted(set(writes) & set(reads))} are both written and read")
        if not isinstance(status_bits, int) or status_bits < 0:
            raise ValueError(f"status_bits must be a non-negative integer, not {status_bits!r}")
        info = bytes(info)
        if len(info) > 255:
            raise ValueError(f"info is {len(info)} bytes; at most 255 fit its length byte")
        if timeout is not None and (not isinstance(timeout, int) or timeout < 1):
            raise ValueError(f"timeout must be a positive number of cycles or None, not {timeout!r}")
        self._writes, self._reads = dict(writes), dict(reads)
        self._status_bits, self._info, self._timeout = status_bits, info, timeout
        self._ops = assign_opcodes(writes, reads, bool(status_bits))
        members = {"i": In(stream.Signature(8)), "o": Out(stream.Signature(8))}
        members.update({name: Out(sig) for name, sig in writes.items()})
        members.update({name: In(sig) for name, sig in reads.items()})
        if status_bits:
            members["status"] = In(status_bits)
        members.update({"rx_error": In(1), "soft_reset": Out(1), "busy": Out(1), "flags": Out(4)})
        super().__init__(members)

    @property
    def opcodes(self) -> dict[str, int]:
        """Opcode of every command: ``info``, ``reset``, each stream by name, ``status``."""
        return dict(self._ops)

    @property
    def framings(self) -> dict[str, Framing]:
        """The :class:`Framing` of every stream by name."""
        return {name: framing(sig) for name, sig in (*self._writes.items(), *self._reads.items())}

    @property
    def status_bytes(self) -> int:
        return -(-self._status_bits // 8)

    @property
    def info(self) -> bytes:
        return self._info

    @property
    def timeout(self) -> int | None:
        return self._timeout

    def elaborate(self, platform):
        m = Module()
        fr = self.framings
        writes, reads = list(self._writes), list(self._reads)
        info = self._info
        w_in = 8 * max([fr[n].write_bytes for n in writes] or [1])
        w_out = 8 * max([1 + self.status_bytes, 2 + len(info)] + [fr[n].read_bytes for n in reads])

        op = Signal(8)
        count_lo = Signal(8)
        beats = Signal(16)                             # beats still to come in this command
        byte_idx = Signal(range(max(2, w_in // 8)))
        which = Signal(range(max(2, len(writes), len(reads))))
        rx_sr = Signal(w_in)
        tx_sr = Signal(w_out)
        tx_left = Signal(range(w_out // 8 + 1))
        after = Signal(2)                              # what follows SEND
        AFTER_IDLE, AFTER_STATUS, AFTER_LOAD = 0, 1, 2
        flags = Signal(4)
        set_flags = Signal(4)
        m.d.sync += flags.eq(flags | set_flags)
        m.d.comb += self.flags.eq(flags)

        # --- one buffered beat per write stream ------------------------------------------------
        bufs, valids = {}, {}
        for name in writes:
            port = getattr(self, name)
            bufs[name] = buf = Signal(port.payload.shape(), name=f"{name}_buf")
            valids[name] = valid = Signal(name=f"{name}_full")
            m.d.comb += [port.valid.eq(valid), port.payload.eq(buf)]
            with m.If(port.valid & port.ready):
                m.d.sync += valid.eq(0)

        # --- watchdog --------------------------------------------------------------------------
        waiting = Signal()
        expired = Signal()
        if self._timeout is not None:
            # ``expired`` is a register (``quiet == timeout``, compared on the counter's next value),
            # so the flag that gates the FSM and the row buffer's enables comes from a flop.
            quiet = Signal(range(self._timeout + 1))
            quiet_next = Signal.like(quiet)
            moved = Signal()
            m.d.comb += [moved.eq(self.i.valid & self.i.ready), quiet_next.eq(quiet)]
            for name in reads:
                port = getattr(self, name)
                with m.If(port.valid & port.ready):
                    m.d.comb += moved.eq(1)
            with m.If(~waiting | moved):
                m.d.comb += quiet_next.eq(0)
            with m.Elif(~expired):
                m.d.comb += quiet_next.eq(quiet + 1)
            m.d.sync += [quiet.eq(quiet_next), expired.eq(quiet_next == self._timeout)]

        def answer(value, nbytes, then):
            """Send the ``nbytes`` low bytes of ``value``, least significant first, then go to ``then``."""
            m.d.sync += [tx_sr.eq(value), tx_left.eq(nbytes), after.eq(then)]
            m.next = "SEND"

        def raise_flag(status):
            m.d.comb += set_flags[status.value.bit_length() - 1].eq(1)

        def header():
            return op | RESPONSE

        def give_up():
            raise_flag(Status.TIMEOUT)
            m.next = "IDLE"

        with m.If(self.rx_error):
            raise_flag(Status.LINE)

        with m.FSM(name="bridge") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += op.eq(self.i.payload)
                    m.next = "COUNT_LO"
            with m.State("COUNT_LO"):
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        m.d.sync += count_lo.eq(self.i.payload)
                        m.next = "COUNT_HI"
            with m.State("COUNT_HI"):
                m.d.comb += waiting.eq(1)
                n = Cat(count_lo, self.i.payload)
                with m.If(expired):
                    give_up()
                with m.Else():
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        m.d.sync += [beats.eq(n), byte_idx.eq(0)]
                        with m.Switch(op):
                            with m.Case(OP_INFO):
                                answer(Cat(header(), C(len(info), 8),
                                           C(int.from_bytes(info, "little"), 8 * len(info))),
                                       2 + len(info), AFTER_STATUS)
                            with m.Case(OP_RESET):
                                m.d.comb += self.soft_reset.eq(1)
                                m.d.sync += [valid.eq(0) for valid in valids.values()]
                                answer(header(), 1, AFTER_STATUS)
                            for k, name in enumerate(writes):
                                with m.Case(self._ops[name]):
                                    m.d.sync += which.eq(k)
                                    with m.If(n == 0):
                                        m.next = "DRAIN"
                                    with m.Else():
                                        m.next = "RECV"
                            for k, name in enumerate(reads):
                                with m.Case(self._ops[name]):
                                    m.d.sync += which.eq(k)
                                    answer(header(), 1, Mux(n == 0, AFTER_STATUS, AFTER_LOAD))
                            if self._status_bits:
                                with m.Case(self._ops["status"]):
                                    answer(Cat(header(), self.status), 1 + self.status_bytes, AFTER_STATUS)
                            with m.Default():
                                raise_flag(Status.BAD_OP)
                                answer(header(), 1, AFTER_STATUS)
            with m.State("RECV"):
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        sr_next = Cat(rx_sr[8:], self.i.payload)
                        m.d.sync += [rx_sr.eq(sr_next), byte_idx.eq(byte_idx + 1)]
                        with m.Switch(which):
                            for k, name in enumerate(writes):
                                f, port = fr[name], getattr(self, name)
                                nb = f.write_bytes
                                with m.Case(k):
                                    with m.If(byte_idx == nb - 1):
                                        wire = sr_next[w_in - 8 * nb:]
                                        m.d.sync += [byte_idx.eq(0), beats.eq(beats - 1)]
                                        with m.If(valids[name] & ~port.ready):
                                            raise_flag(Status.OVERRUN)
                                        with m.Else():
                                            d, u, last = _split(bufs[name])
                                            m.d.sync += [valids[name].eq(1), d.eq(wire[:f.data_bits])]
                                            if u is not None:
                                                m.d.sync += u.eq(wire[f.data_bits:f.data_bits + f.user_bits])
                                            if last is not None:
                                                m.d.sync += last.eq(beats == 1)
                                        with m.If(beats == 1):
                                            m.next = "DRAIN"
            with m.State("DRAIN"):
                # The command's last beat has arrived; answer once it has been taken.
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    with m.Switch(which):
                        for k, name in enumerate(writes):
                            with m.Case(k):
                                with m.If(~valids[name]):
                                    answer(header(), 1, AFTER_STATUS)
            with m.State("LOAD"):
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    with m.Switch(which):
                        for k, name in enumerate(reads):
                            f, port = fr[name], getattr(self, name)
                            with m.Case(k):
                                m.d.comb += port.ready.eq(1)
                                with m.If(port.valid):
                                    d, u, last = _split(port.payload)
                                    tail = Cat(*(v for v in (u, last) if v is not None))
                                    wire = Cat(d, C(0, 8 * f.data_bytes - f.data_bits), tail)
                                    m.d.sync += beats.eq(beats - 1)
                                    answer(wire, f.read_bytes, Mux(beats == 1, AFTER_STATUS, AFTER_LOAD))
            with m.State("SEND"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(tx_sr[:8])]
                with m.If(self.o.ready):
                    m.d.sync += [tx_sr.eq(tx_sr >> 8), tx_left.eq(tx_left - 1)]
                    with m.If(tx_left == 1):
                        with m.Switch(after):
                            with m.Case(AFTER_IDLE):
                                m.next = "IDLE"
                            with m.Case(AFTER_STATUS):
                                m.next = "STATUS"
                            with m.Case(AFTER_LOAD):
                                m.next = "LOAD"
            with m.State("STATUS"):
                # The status byte: the flags collected so far, which start again from here.
                m.d.sync += flags.eq(set_flags)
                answer(flags | set_flags, 1, AFTER_IDLE)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
