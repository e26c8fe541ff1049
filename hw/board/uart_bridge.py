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
from contextlib import contextmanager
from dataclasses import dataclass

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UartBridge", "Framing", "framing", "assign_opcodes", "Status", "OP_INFO", "OP_RESET",
           "OP_FIRST_STREAM", "RESPONSE", "MAX_COUNT", "RX_GROUP", "SR_GROUP"]

OP_INFO = 0x00
OP_RESET = 0x01
#: Opcode of the first write stream; the others follow (writes, reads, then the status word).
OP_FIRST_STREAM = 0x02
#: An answer starts with the command's opcode with this bit set.
RESPONSE = 0x80
#: Most beats one command can carry (its 16-bit count).
MAX_COUNT = 0xFFFF


#: Bytes of the receive register per enable group: each group has its own write strobe, byte
#: register and copy enable (a flop each), so none of them drives more than ``8 * RX_GROUP`` bits.
RX_GROUP = 16
#: Bytes of an answer shift register per group: each group loads or shifts by a flop of its own.
SR_GROUP = 8


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

    Each write stream has a buffer of one beat besides the receive register, so the component has a
    whole beat's time to take a beat before the next one is complete; a beat that finds the buffer
    still full is dropped and reported (:attr:`Status.OVERRUN`). A command that stalls for about
    ``timeout`` cycles (the host stopped sending, a read stream gave no beat, a write beat was not
    taken) is abandoned and reported (:attr:`Status.TIMEOUT`), so a host that died in the middle of
    a command cannot leave the bridge out of step for the next one.

    Structure and timing. The bridge runs at the UART's byte rate, so it spends cycles to keep every
    path short in a chip where its wide registers spread over the die. What comes from outside
    (``i``, ``o.ready``, a stream's ``valid``, ``ready`` or payload) reaches a few flops through one
    look-up table (two for ``i.ready`` and a read stream's ``ready``, which also see the state), and
    nothing wide depends on it before it is registered. Every enable of a wide register comes from
    a flop of its own group of at most :data:`RX_GROUP` bytes (receive side) or :data:`SR_GROUP`
    bytes (answer side), directly or through one look-up table with two control flops, so that it
    can sit next to what it enables; the control state machine has a flop per state:

    * ``i.ready`` is a flop. A byte taken in cycle t is decoded in t + 1 (so the bridge takes at
      most one byte every three cycles; a UART byte takes forty or more). The watchdog counts
      cycles without a byte or read beat decoded; when it expires, the state machine abandons the
      command in its next decision, and a byte taken meanwhile becomes the next command's opcode,
      as it would have had it come after the timeout;
    * a write byte decoded in t is written into its own byte slot of the receive register shared by
      the write streams in t + 3 (``rx`` from t + 4): in t + 1 it is registered with one-hot
      pointers to its slot (a group of :data:`RX_GROUP` slots and a slot within the group), in
      t + 2 into the byte register and write strobe of its group, in t + 3 into its slot's enable,
      a flop per slot. No byte moves once written;
    * a beat whose last byte is decoded in t is judged in t + 1: it is kept if the stream's buffer
      (its ``valid`` flop, which already reflects a take in t) is empty and no earlier beat is on
      its way into it, else it is dropped (OVERRUN). A kept beat is copied from ``rx`` into the
      buffer one group per cycle, from t + 4 on (each group's enable is a flop of a chain), and is
      on the stream once its last group is copied. The answer to a write command follows once its
      last beat has left the buffer. ``ready`` of a write stream only clears its ``valid`` flop;
    * a read stream's ``ready`` is a flop, raised in LOAD; the handshake is registered, and the
      beat is taken into a shift register that loads the stream's payload in every cycle in which
      it holds nothing, so that it holds the beat of the handshake. The status word is taken the
      same way, in the cycle in which the status command's count is decoded;
    * the shift registers keep a valid flag per byte, moved with the bytes; the flag of a group's
      first byte says whether the group holds anything, which is the group's load-or-shift select
      and part of its enable. The ``INFO`` answer comes from a table read by a byte counter, the
      answer's first byte from the opcode register;
    * every answer byte goes through one output register (``o.valid``, ``o.payload``): a source
      gives its next byte once the register is empty, and shifts in the following cycle. The
      status byte that ends an answer takes the flags when it enters the output register, that is
      once the answer's last byte has been taken.

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
        Cycles after which a stalled command is abandoned (a few cycles more, see above); None
        waits forever.

    Members
    -------
    i : In(stream.Signature(8))
        Received bytes.
    o : Out(stream.Signature(8))
        Bytes to send.
    <write name> : Out(writes[name])
    <read name> : In(reads[name])
    status : In(status_bits)
        Only with ``status_bits``; sampled in the cycle in which the status command's count is
        decoded (the cycle after its last byte was taken).
    rx_error : In(1)
        Pulse from the receiver: a framing error or a lost byte (:attr:`Status.LINE`).
    soft_reset : Out(1)
        One-cycle pulse (from a flop) on ``RESET``, the cycle after its count was decoded.
    busy : Out(1)
        A command is in progress or an answer byte has not left yet.
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
        rom = bytes([len(self._info)]) + self._info           # the INFO answer after its first byte
        st_bytes = self.status_bytes
        in_bytes = max([fr[n].write_bytes for n in writes] or [1])
        rd_bytes = max([fr[n].read_bytes for n in reads] or [1])

        # --- input: ``i.ready`` is a flop; a byte taken in cycle t is decoded in t + 1 -----------
        in_rdy = Signal()
        in_v = Signal()                                # ``in_byte`` was taken in the previous cycle
        in_byte = Signal(8, reset_less=True)
        take = self.i.valid & in_rdy
        m.d.comb += self.i.ready.eq(in_rdy)
        m.d.sync += in_v.eq(take)
        with m.If(take):
            m.d.sync += in_byte.eq(self.i.payload)

        # What the state machine branches on is registered: the opcode's kind and stream (decoded as
        # the opcode arrives), ``count_lo == 0``, ``beats == 1``, the beat's last byte.
        op = Signal(8, reset_less=True)
        is_info, is_reset, is_write, is_read, is_status = (Signal(name=f"is_{n}", reset_less=True) for n in
                                                           ("info", "reset", "write", "read", "status"))
        which = Signal(range(max(2, len(writes), len(reads))), reset_less=True)
        count_lo = Signal(8, reset_less=True)
        lo_zero = Signal(reset_less=True)              # ``count_lo == 0``
        beats = Signal(16, reset_less=True)            # beats still to come in this command
        one_left = Signal(reset_less=True)             # ``beats == 1``
        byte_idx = Signal(range(max(2, in_bytes)), reset_less=True)
        idx_last = Signal(reset_less=True)             # ``byte_idx`` is the beat's last byte
        flags = Signal(4)
        set_flags = Signal(4)
        m.d.sync += flags.eq(flags | set_flags)
        m.d.comb += self.flags.eq(flags)

        def raise_flag(status):
            m.d.comb += set_flags[status.value.bit_length() - 1].eq(1)

        with m.If(self.rx_error):
            raise_flag(Status.LINE)

        # --- receive: bytes written into their slots ---------------------------------------------
        # Decoded in t: in t + 1 ``wr``, ``wb_byte`` and the slot's one-hot pointers ``col`` (slot
        # within its group) and ``grp`` (the group), which then move on to the next slot; in t + 2
        # the group's strobe ``wr_g`` and byte ``wb_g`` (``col_d`` is ``col`` one cycle later); in
        # t + 3 the slot's enable ``wb_en``, a flop per slot.
        cols = min(RX_GROUP, in_bytes)
        groups = -(-in_bytes // cols)
        rx = Signal(8 * in_bytes, reset_less=True)
        wr, wb_byte = Signal(name="wr"), Signal(8, name="wb_byte", reset_less=True)
        col, grp = Signal(cols, name="col", init=1, reset_less=True), Signal(groups, name="grp", init=1,
                                                                             reset_less=True)
        col_d = Signal(cols, name="col_d", reset_less=True)
        # how the pointers move after t + 1
        p_restart, p_next, p_group = (Signal(name=n) for n in ("p_restart", "p_next", "p_group"))
        wr_g = [Signal(name=f"wr_g{g}", reset_less=True) for g in range(groups)]
        wb_g = [Signal(8, name=f"wb_g{g}", reset_less=True) for g in range(groups)]
        wb_en = Signal(in_bytes, reset_less=True)
        m.d.sync += [wr.eq(0), p_restart.eq(0), p_next.eq(0), p_group.eq(0), col_d.eq(col)]
        with m.If(p_restart):
            m.d.sync += [col.eq(1), grp.eq(1)]
        with m.Elif(p_next):
            m.d.sync += col.eq(col.rotate_left(1))
            with m.If(p_group):
                m.d.sync += grp.eq(grp << 1)
        for g in range(groups):
            m.d.sync += wr_g[g].eq(wr & grp[g])
            with m.If(wr & grp[g]):
                m.d.sync += wb_g[g].eq(wb_byte)
        for s in range(in_bytes):
            g, c = divmod(s, cols)
            m.d.sync += wb_en[s].eq(wr_g[g] & col_d[c])
            with m.If(wb_en[s]):
                m.d.sync += rx[8 * s:8 * s + 8].eq(wb_g[g])

        # --- one buffered beat per write stream ------------------------------------------------
        # A beat whose last byte is decoded in t: ``<name>_done`` in t + 1 judges it against the
        # buffer's ``valid`` flop and the beats on their way; ``<name>_keep`` in t + 2; then a chain
        # of flops, one per group of ``rx``, whose flop g copies group g into the buffer in t + 4 + g;
        # ``<name>_fill`` a cycle after the last sets ``valid``. ``<name>_copying`` covers the chain.
        # ``last_4`` is the beat's ``last`` four cycles after its decoding, when group 0 is copied.
        last_1, last_2, last_3, last_4 = (Signal(name=f"last_{k}", reset_less=True) for k in range(1, 5))
        m.d.sync += [last_2.eq(last_1), last_3.eq(last_2), last_4.eq(last_3)]
        valids, dones, keeps, copyings, fills = {}, {}, {}, {}, {}
        for name in writes:
            f, port = fr[name], getattr(self, name)
            buf = Signal(port.payload.shape(), name=f"{name}_buf", reset_less=True)
            valids[name] = valid = Signal(name=f"{name}_full")
            dones[name] = done = Signal(name=f"{name}_done")
            keeps[name] = keep = Signal(name=f"{name}_keep")
            copyings[name] = copying = Signal(name=f"{name}_copying")
            fills[name] = fill = Signal(name=f"{name}_fill")
            chain = [Signal(name=f"{name}_go{g}") for g in range(-(-f.write_bytes // cols))]
            m.d.comb += [port.valid.eq(valid), port.payload.eq(buf)]
            busy_w = valid | copying | fill
            m.d.sync += [done.eq(0), keep.eq(done & ~busy_w & ~self.soft_reset)]
            with m.If(done & busy_w):
                raise_flag(Status.OVERRUN)
            staged = Signal(name=f"{name}_staged")
            m.d.sync += [staged.eq(keep), chain[0].eq(staged)]
            m.d.sync += [chain[g].eq(chain[g - 1]) for g in range(1, len(chain))]
            m.d.sync += [copying.eq((keep | copying & ~chain[-1]) & ~self.soft_reset),
                         fill.eq(chain[-1] & copying & ~self.soft_reset)]
            m.d.sync += valid.eq(~self.soft_reset & (fill | valid & ~port.ready))
            d, u, last = _split(buf)
            for g, go in enumerate(chain):
                lo, hi = 8 * cols * g, 8 * cols * (g + 1)
                with m.If(go):
                    for field, base, width in ((d, 0, f.data_bits), (u, f.data_bits, f.user_bits)):
                        a, b = max(lo, base), min(hi, base + width)
                        if field is not None and a < b:
                            m.d.sync += field[a - base:b - base].eq(rx[a:b])
                    if g == 0 and last is not None:
                        m.d.sync += last.eq(last_4)

        # The stream ``which`` had no beat in its buffer or on its way there in the previous cycle
        # (cleared as DRAIN is entered after a beat, so it never counts a beat still arriving).
        drained = Signal()
        if writes:
            m.d.sync += drained.eq(Array(~(valids[n] | dones[n] | keeps[n] | copyings[n] | fills[n])
                                         for n in writes)[which])

        # --- answer sources: shift registers, the INFO table, the opcode ------------------------
        def shift_register(name, nbytes, fresh, loads, sh):
            """A shift register of ``nbytes`` bytes with a valid flag per byte, of which byte 0 is sent.

            While it holds nothing it loads ``fresh`` in every cycle. ``loads`` are ``(flop, d, n)``:
            a flop (whose next value is ``d``) set in the cycle after the one whose ``fresh`` is to
            be kept, which marks the first ``n`` bytes valid. ``sh`` is ``(flop, d)``: the flop
            shifts it by a byte. Each group of :data:`SR_GROUP` bytes loads or shifts by an enable
            flop of its own, computed a cycle ahead from the next values of its first byte's flag,
            the loads and the shift, so that no load flop drives a group's enables through logic."""
            sh, sh_n = sh
            sr = Signal(8 * nbytes, name=f"{name}_sr", reset_less=True)
            v = Signal(nbytes, name=f"{name}_v")
            v_n = Signal(nbytes, name=f"{name}_v_next")
            hold_n = Cat(*(d for _, d, _ in loads)).any()
            for k in range(nbytes):
                ld = Cat(*(c for c, _, n in loads if k < n)).any()
                m.d.comb += v_n[k].eq(ld | Mux(sh, v[k + 1] if k + 1 < nbytes else 0, v[k]))
            m.d.sync += v.eq(v_n)
            shifted = Cat(sr[8:], sr[-8:])             # the top byte's new value is never valid
            for g in range(0, nbytes, SR_GROUP):
                # ``en`` equals ``~v[g] & ~hold | sh`` of its cycle (1 in reset, when all are 0).
                en = Signal(name=f"{name}_en{g // SR_GROUP}", init=1)
                m.d.sync += en.eq(~v_n[g] & ~hold_n | sh_n)
                lo, hi = 8 * g, 8 * min(g + SR_GROUP, nbytes)
                with m.If(en):
                    m.d.sync += sr[lo:hi].eq(Mux(v[g], shifted[lo:hi], fresh[lo:hi]))
            return sr[:8]

        # The answer's first byte comes from the opcode (state HEAD), the status byte from the flags
        # (state STATUS), the bytes between them from one of ``sources`` (state SEND, ``src``).
        SRC_INFO, SRC_STATUS, SRC_READ = range(3)
        src = Signal(3, name="src")                    # one-hot: where SEND's bytes come from
        ov, ob = Signal(name="ov"), Signal(8, name="ob", reset_less=True)     # the output register
        load = Signal(name="load")                     # a source's byte enters the output register
        load_head, load_flags = Signal(name="load_head"), Signal(name="load_flags")
        m.d.comb += [load.eq(~ov & src.any()), self.o.valid.eq(ov), self.o.payload.eq(ob)]
        sources = [C(0, 8)] * 3

        info_idx = Signal(range(len(rom) + 1))
        info_q = Signal(8, reset_less=True)
        m.d.sync += info_q.eq(Array(C(b, 8) for b in rom)[info_idx] if len(rom) > 1 else rom[0])
        with m.If(load & src[SRC_INFO]):
            m.d.sync += info_idx.eq(info_idx + 1)
        sources[SRC_INFO] = info_q

        ld_status, ld_status_n = Signal(), Signal()
        m.d.sync += ld_status.eq(ld_status_n)
        if st_bytes:
            st_sh, st_sh_n = Signal(), Signal()
            m.d.comb += st_sh_n.eq(load & src[SRC_STATUS])
            m.d.sync += st_sh.eq(st_sh_n)
            # Padding bits load ``ld_status``, which is 0 whenever they load: no constant makes
            # synthesis turn a bit's load into a reset from a second look-up table.
            fresh = Cat(self.status, ld_status.replicate(8 * st_bytes - self._status_bits))
            sources[SRC_STATUS] = shift_register("st", st_bytes, fresh, [(ld_status, ld_status_n, st_bytes)],
                                                   (st_sh, st_sh_n))

        # A read stream's ``ready`` (``<name>_rdy``) is a flop, raised while LOAD wants a beat
        # (``rd_arm``) and dropped after a handshake, which ``<name>_got`` registers.
        rd_arm = Signal(name="rd_arm")
        rdys, gots, shakes = {}, {}, {}
        for k, name in enumerate(reads):
            port = getattr(self, name)
            rdys[name] = rdy = Signal(name=f"{name}_rdy")
            gots[name] = got = Signal(name=f"{name}_got")
            shakes[name] = shake = port.valid & rdy
            sel = (which == k) if len(reads) > 1 else 1
            m.d.comb += port.ready.eq(rdy)
            m.d.sync += [rdy.eq(rd_arm & sel & ~shake), got.eq(shake)]
        got_any = Cat(*gots.values()).any()
        rdy_any = Cat(*rdys.values()).any()
        if reads:
            wires = []
            for name in reads:
                f, port = fr[name], getattr(self, name)
                d, u, last = _split(port.payload)
                tail = Cat(*(v for v in (u, last) if v is not None))
                # padding: ``got_any``, 0 whenever it loads (as for the status word)
                wires.append(Cat(d, got_any.replicate(8 * f.data_bytes - f.data_bits), tail,
                                 got_any.replicate(8 * rd_bytes)))
            beat = Array(wires)[which] if len(wires) > 1 else wires[0]
            rd_sh, rd_sh_n = Signal(), Signal()
            m.d.comb += rd_sh_n.eq(load & src[SRC_READ])
            m.d.sync += rd_sh.eq(rd_sh_n)
            sources[SRC_READ] = shift_register("rd", rd_bytes, beat,
                                               [(gots[n], shakes[n], fr[n].read_bytes) for n in reads],
                                               (rd_sh, rd_sh_n))

        with m.If(load):
            byte = 0
            for k, source in enumerate(sources):
                byte = byte | Mux(src[k], source, 0)
            m.d.sync += ob.eq(byte)
        with m.If(load_head):
            m.d.sync += ob.eq(op | RESPONSE)
        m.d.sync += ov.eq(load | load_head | load_flags | ov & ~self.o.ready)

        # --- watchdog --------------------------------------------------------------------------
        waiting = Signal()
        expired = Signal()
        if self._timeout is not None:
            # ``expired`` is a register, set as ``quiet`` reaches ``timeout`` and held until the
            # command moves or ends (``quiet`` then stays at ``timeout``). It is computed on ``quiet``
            # itself (``timeout - 1``), not on its next value, so no adder feeds it. A move is a byte
            # or a read beat being decoded (both registered).
            quiet = Signal(range(self._timeout + 1))
            moved = in_v | got_any
            with m.If(~waiting | moved):
                m.d.sync += [quiet.eq(0), expired.eq(0)]
            with m.Elif(~expired):
                m.d.sync += [quiet.eq(quiet + 1), expired.eq(quiet == self._timeout - 1)]

        # --- control -----------------------------------------------------------------------------
        # A state machine with a flop per state (``st_<name>``, one-hot), so that every test of the
        # state is a flop: ``state(name)`` opens a state's branch and ``goto(name)`` is a transition
        # from it. ``acc`` (a flop) is set while the state accepts bytes; ``i.ready`` rises in the
        # cycle after one in which it was set and no byte was taken or decoded, so a byte taken is
        # always decoded in an accepting state. A read stream's ``ready`` rises while LOAD has no
        # beat and the watchdog has not expired (``rd_arm``).
        STATES = ("IDLE", "COUNT_LO", "COUNT_HI", "RECV", "DRAIN", "LOAD", "HEAD", "SEND", "STATUS")
        ACCEPTING = ("IDLE", "COUNT_LO", "COUNT_HI", "RECV")
        st = {n: Signal(name=f"st_{n.lower()}", init=n == "IDLE") for n in STATES}
        nxt = {n: Signal(name=f"nxt_{n.lower()}") for n in STATES}
        acc = Signal(name="acc", init=1)
        m.d.comb += [nxt[n].eq(st[n]) for n in STATES]
        m.d.sync += [st[n].eq(nxt[n]) for n in STATES]
        m.d.sync += [acc.eq(Cat(*(nxt[n] for n in ACCEPTING)).any()), in_rdy.eq(acc & ~in_v & ~take)]
        m.d.comb += rd_arm.eq(st["LOAD"] & ~got_any & ~expired)
        here = []

        @contextmanager
        def state(name):
            here[:] = [name]
            with m.If(st[name]):
                yield

        def goto(name):
            m.d.comb += [nxt[here[0]].eq(0), nxt[name].eq(1)]

        tx_left = Signal(range(max(1, len(rom), st_bytes, rd_bytes) + 1), reset_less=True)
        tx_one = Signal(reset_less=True)               # ``tx_left == 1``
        more = Signal(reset_less=True)                 # SEND is followed by LOAD, not STATUS
        after = Signal(2, reset_less=True)             # what follows HEAD
        AFTER_STATUS, AFTER_LOAD, AFTER_INFO, AFTER_ST = range(4)
        m.d.sync += self.soft_reset.eq(0)

        def head(then):
            """Send the answer's first byte, then go on as ``then`` says."""
            m.d.sync += after.eq(then)
            goto("HEAD")

        def send(nbytes, source, then_load=0):
            """Send ``nbytes`` bytes from ``source``, then go to LOAD (``then_load``) or STATUS."""
            m.d.sync += [tx_left.eq(nbytes), tx_one.eq(nbytes == 1), more.eq(then_load), src.eq(1 << source)]
            goto("SEND")

        def give_up():
            raise_flag(Status.TIMEOUT)
            goto("IDLE")

        # Whether a beat of the write stream ``which`` has one byte (``one_byte``), and whether
        # ``byte_idx`` is its last byte but one (``before_end``).
        nbs = [fr[name].write_bytes for name in writes] or [1]
        one_byte = Array(C(nb == 1) for nb in nbs)[which] if len(nbs) > 1 else C(nbs[0] == 1)
        before_end = Array(byte_idx == max(nb - 2, 0) for nb in nbs)[which] if len(nbs) > 1 \
            else byte_idx == max(nbs[0] - 2, 0)

        with state("IDLE"):
            with m.If(in_v):
                b = in_byte
                m.d.sync += [op.eq(b), is_info.eq(b == OP_INFO), is_reset.eq(b == OP_RESET),
                             is_write.eq(0), is_read.eq(0), is_status.eq(0)]
                for k, name in enumerate(writes):
                    with m.If(b == self._ops[name]):
                        m.d.sync += [is_write.eq(1), which.eq(k)]
                for k, name in enumerate(reads):
                    with m.If(b == self._ops[name]):
                        m.d.sync += [is_read.eq(1), which.eq(k)]
                if self._status_bits:
                    m.d.sync += is_status.eq(b == self._ops["status"])
                goto("COUNT_LO")
        with state("COUNT_LO"):
            with m.If(in_v):
                m.d.sync += [count_lo.eq(in_byte), lo_zero.eq(in_byte == 0)]
                goto("COUNT_HI")
            with m.Elif(expired):
                give_up()
        with state("COUNT_HI"):
            n = Cat(count_lo, in_byte)
            n_zero = lo_zero & (in_byte == 0)
            with m.If(in_v):
                m.d.sync += [beats.eq(n), one_left.eq(n == 1), byte_idx.eq(0), idx_last.eq(one_byte),
                             p_restart.eq(1)]
                with m.If(is_info):
                    m.d.sync += info_idx.eq(0)
                    head(AFTER_INFO)
                with m.Elif(is_reset):
                    m.d.sync += self.soft_reset.eq(1)
                    head(AFTER_STATUS)
                with m.Elif(is_write):
                    with m.If(n_zero):
                        goto("DRAIN")
                    with m.Else():
                        goto("RECV")
                with m.Elif(is_read):
                    head(Mux(n_zero, AFTER_STATUS, AFTER_LOAD))
                with m.Elif(is_status):
                    m.d.comb += ld_status_n.eq(1)
                    head(AFTER_ST)
                with m.Else():
                    raise_flag(Status.BAD_OP)
                    head(AFTER_STATUS)
            with m.Elif(expired):
                give_up()
        with state("RECV"):
            with m.If(in_v):
                m.d.sync += [wr.eq(1), wb_byte.eq(in_byte)]
                with m.If(idx_last):
                    m.d.sync += [byte_idx.eq(0), idx_last.eq(one_byte), p_restart.eq(1),
                                 beats.eq(beats - 1), one_left.eq(beats == 2), last_1.eq(one_left)]
                    for k, name in enumerate(writes):
                        m.d.sync += dones[name].eq(which == k)
                    with m.If(one_left):
                        m.d.sync += drained.eq(0)
                        goto("DRAIN")
                with m.Else():
                    m.d.sync += [byte_idx.eq(byte_idx + 1), idx_last.eq(before_end), p_next.eq(1)]
                    if groups > 1:                 # then ``cols`` is RX_GROUP, a power of two
                        m.d.sync += p_group.eq((byte_idx & (cols - 1)) == cols - 1)
            with m.Elif(expired):
                give_up()
        with state("DRAIN"):
            # The command's last beat has arrived; answer once it has been taken.
            with m.If(expired):
                give_up()
            with m.Elif(drained):
                head(AFTER_STATUS)
        with state("LOAD"):
            # Wait for a beat of the read stream ``which``: its ``ready`` is raised from the
            # next cycle (``rd_arm``); an expired watchdog first drops it, then gives up, so
            # that no beat is taken that nobody sends.
            with m.If(got_any):
                m.d.sync += [beats.eq(beats - 1), one_left.eq(beats == 2)]
                if len(reads) > 1:
                    with m.Switch(which):
                        for k, name in enumerate(reads):
                            with m.Case(k):
                                send(fr[name].read_bytes, SRC_READ, ~one_left)
                else:
                    send(fr[reads[0]].read_bytes, SRC_READ, ~one_left)
            with m.Elif(expired & ~rdy_any):
                give_up()
        with state("HEAD"):
            # The answer's first byte, once the output register is free.
            with m.If(~ov):
                m.d.comb += load_head.eq(1)
                with m.Switch(after):
                    with m.Case(AFTER_STATUS):
                        goto("STATUS")
                    with m.Case(AFTER_LOAD):
                        goto("LOAD")
                    with m.Case(AFTER_INFO):
                        send(len(rom), SRC_INFO)
                    if st_bytes:
                        with m.Case(AFTER_ST):
                            send(st_bytes, SRC_STATUS)
        with state("SEND"):
            with m.If(load):
                m.d.sync += [tx_left.eq(tx_left - 1), tx_one.eq(tx_left == 2)]
                with m.If(tx_one):
                    m.d.sync += src.eq(0)
                    with m.If(more):
                        goto("LOAD")
                    with m.Else():
                        goto("STATUS")
        with state("STATUS"):
            # The status byte, once the output register is free: the flags collected so far,
            # which start again from here.
            with m.If(~ov):
                m.d.comb += load_flags.eq(1)
                m.d.sync += [flags.eq(set_flags), ob.eq(flags | set_flags)]
                goto("IDLE")

        m.d.comb += [self.busy.eq(~st["IDLE"] | ov),
                     waiting.eq(st["COUNT_LO"] | st["COUNT_HI"] | st["RECV"] | st["DRAIN"] | st["LOAD"])]
        return m
