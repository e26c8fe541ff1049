"""The UART command bridge as it was before its control paths were registered and its wide enables
replicated (``hw/board/uart_bridge.py`` at commit 67d2556), kept unchanged as the reference that
``tests/hw/board/test_uart_bridge_sim.py`` compares the current :class:`hw.board.uart_bridge.UartBridge`
against: the same bytes in, with random gaps and backpressure, must give the same bytes out.

Only the old ``elaborate`` is kept; the constructor, the protocol helpers (framing, opcodes, status
bits) are the current module's, which did not change.
"""

from __future__ import annotations

from amaranth import *

from hw.board.uart_bridge import OP_INFO, OP_RESET, RESPONSE, Status, UartBridge, _split

__all__ = ["ReferenceBridge"]


class ReferenceBridge(UartBridge):
    """The bridge as it was before its control paths were registered (commit 67d2556); see the
    module docstring. Its constructor, members and properties are the current bridge's, which did
    not change; only :meth:`elaborate` is the old one."""

    def elaborate(self, platform):
        m = Module()
        fr = self.framings
        writes, reads = list(self._writes), list(self._reads)
        info = self._info
        in_bytes = max([fr[n].write_bytes for n in writes] or [1])
        an_bytes = max(1 + self.status_bytes, 2 + len(info))
        rd_bytes = max([fr[n].read_bytes for n in reads] or [1])

        # What the FSM branches on is registered: the opcode's kind and stream (decoded as the
        # opcode arrives), ``count_lo == 0``, ``beats == 1``, the beat's last byte, the answer's
        # last byte.
        op = Signal(8)
        is_info, is_reset, is_write, is_read, is_status = (Signal(name=f"is_{n}") for n in
                                                           ("info", "reset", "write", "read", "status"))
        which = Signal(range(max(2, len(writes), len(reads))))
        count_lo = Signal(8)
        lo_zero = Signal()                             # ``count_lo == 0``
        beats = Signal(16)                             # beats still to come in this command
        one_left = Signal()                            # ``beats == 1``
        byte_idx = Signal(range(max(2, in_bytes)))
        idx_last = Signal()                            # ``byte_idx`` is the beat's last byte
        tx_left = Signal(range(max(an_bytes, rd_bytes) + 1))
        tx_one = Signal()                              # ``tx_left == 1``
        # In SEND, one of these flops (beside the FSM's state) says what is sent: ``an_sr``,
        # ``rd_sr`` or ``fl_byte``.
        tx_an, tx_rd, tx_fl = Signal(name="tx_an"), Signal(name="tx_rd"), Signal(name="tx_fl")
        start_an, start_rd, start_fl = Signal(), Signal(), Signal()     # SEND starts in the next cycle
        after = Signal(2)                              # what follows SEND
        AFTER_IDLE, AFTER_STATUS, AFTER_LOAD = 0, 1, 2
        flags = Signal(4)
        set_flags = Signal(4)
        m.d.sync += flags.eq(flags | set_flags)
        m.d.comb += self.flags.eq(flags)

        def raise_flag(status):
            m.d.comb += set_flags[status.value.bit_length() - 1].eq(1)

        # --- receive: bytes written into their slots ---------------------------------------------
        # A received byte is registered with its slot, decoded as one-hot ``byte_idx // 8`` and
        # ``byte_idx % 8`` (``wb_lo`` zero: no byte), and written in the next cycle: each slot's
        # enable is an AND of two flops, and no byte moves once written.
        rx = Signal(8 * in_bytes)
        wb_data = Signal(8)
        wb_lo = Signal(8)
        wb_hi = Signal(-(-in_bytes // 8))
        m.d.sync += wb_lo.eq(0)
        for s in range(in_bytes):
            with m.If(wb_hi[s // 8] & wb_lo[s % 8]):
                m.d.sync += rx[8 * s:8 * s + 8].eq(wb_data)

        # --- one buffered beat per write stream ------------------------------------------------
        # A beat whose last byte was accepted in cycle t is in ``rx`` from t + 2. In t + 1
        # (``<name>_done``) the beat is accepted if the buffer is empty or being taken and no beat
        # is on its way into it; else it is lost (OVERRUN). In t + 2 (``<name>_go``, a flop, the
        # buffer's only enable) ``rx`` is copied into the buffer.
        last_1, last_2 = Signal(), Signal()            # ``last`` of the beat in t + 1, t + 2
        m.d.sync += last_2.eq(last_1)
        bufs, valids, dones, gos = {}, {}, {}, {}
        for name in writes:
            f, port = fr[name], getattr(self, name)
            bufs[name] = buf = Signal(port.payload.shape(), name=f"{name}_buf")
            valids[name] = valid = Signal(name=f"{name}_full")
            dones[name] = done = Signal(name=f"{name}_done")
            gos[name] = go = Signal(name=f"{name}_go")
            m.d.comb += [port.valid.eq(valid), port.payload.eq(buf)]
            m.d.sync += [done.eq(0), go.eq(0)]
            with m.If(port.valid & port.ready):
                m.d.sync += valid.eq(0)
            with m.If(done):
                with m.If(~go & (~valid | port.ready)):
                    m.d.sync += go.eq(1)
                with m.Else():
                    raise_flag(Status.OVERRUN)
            with m.If(go):
                d, u, last = _split(buf)
                m.d.sync += [valid.eq(1), d.eq(rx[:f.data_bits])]
                if u is not None:
                    m.d.sync += u.eq(rx[f.data_bits:f.data_bits + f.user_bits])
                if last is not None:
                    m.d.sync += last.eq(last_2)

        # The stream ``which`` had no beat in its buffer or on its way there in the previous cycle
        # (cleared as DRAIN is entered after a beat, so it never counts a beat still arriving).
        drained = Signal()
        if writes:
            m.d.sync += drained.eq(Array(~valids[n] & ~dones[n] & ~gos[n] for n in writes)[which])

        # --- transmit: two shift registers with registered enables ------------------------------
        # Each is loaded in every cycle in which it is not being sent, so it holds what the cycle
        # that started its sending loaded: ``an_sr`` the answer decided in COUNT_HI or DRAIN,
        # ``rd_sr`` the read beat taken in LOAD. While sent it only shifts: a byte taken in cycle
        # t is shifted out in t + 1 (``an_shift``, ``rd_shift``), so in that cycle the byte to
        # send is the second one. ``fl_byte`` is the status byte.
        an_sr = Signal(8 * an_bytes)
        rd_sr = Signal(8 * rd_bytes)
        fl_byte = Signal(4)
        an_shift, rd_shift = Signal(), Signal()
        an_byte = Mux(an_shift, an_sr[8:16], an_sr[:8]) if an_bytes > 1 else an_sr[:8]
        rd_byte = Mux(rd_shift, rd_sr[8:16], rd_sr[:8]) if rd_bytes > 1 else rd_sr[:8]
        m.d.sync += [an_shift.eq(tx_an & self.o.ready), rd_shift.eq(tx_rd & self.o.ready)]

        # --- watchdog --------------------------------------------------------------------------
        waiting = Signal()
        expired = Signal()
        accepting, loading = Signal(), Signal()        # in COUNT_LO, COUNT_HI or RECV; in LOAD
        if self._timeout is not None:
            # ``expired`` is a register, set as ``quiet`` reaches ``timeout`` and held until the
            # command moves or ends (``quiet`` then stays at ``timeout``). It is computed on ``quiet``
            # itself (``timeout - 1``), not on its next value, so no adder feeds it. A byte or read
            # beat offered while the bridge takes one counts as a move without ``expired`` (which
            # only ends the command: the state after it restarts the count anyway).
            quiet = Signal(range(self._timeout + 1))
            moved = Signal()
            m.d.comb += moved.eq(self.i.valid & accepting)
            for k, name in enumerate(reads):
                port = getattr(self, name)
                with m.If(port.valid & loading & ((which == k) if len(reads) > 1 else 1)):
                    m.d.comb += moved.eq(1)
            with m.If(~waiting | moved):
                m.d.sync += [quiet.eq(0), expired.eq(0)]
            with m.Elif(~expired):
                m.d.sync += [quiet.eq(quiet + 1), expired.eq(quiet == self._timeout - 1)]

        def answer(nbytes, then, *, rd=False, fl=False):
            """Send ``nbytes`` bytes of ``rd_sr`` (``rd``), ``fl_byte`` (``fl``) or ``an_sr``, least
            significant first, then go to ``then``."""
            m.d.comb += (start_rd if rd else start_fl if fl else start_an).eq(1)
            m.d.sync += [tx_left.eq(nbytes),
                         tx_one.eq(nbytes == 1), after.eq(then)]
            m.next = "SEND"

        def header():
            return op | RESPONSE

        def give_up():
            raise_flag(Status.TIMEOUT)
            m.next = "IDLE"

        with m.If(self.rx_error):
            raise_flag(Status.LINE)

        # Whether a beat of the write stream ``which`` has one byte (``one_byte``), and whether
        # ``byte_idx`` is its last byte but one (``before_end``).
        nbs = [fr[name].write_bytes for name in writes] or [1]
        one_byte = Array(C(nb == 1) for nb in nbs)[which] if len(nbs) > 1 else C(nbs[0] == 1)
        before_end = Array(byte_idx == max(nb - 2, 0) for nb in nbs)[which] if len(nbs) > 1 \
            else byte_idx == max(nbs[0] - 2, 0)

        with m.FSM(name="bridge") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    b = self.i.payload
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
                    m.next = "COUNT_LO"
            with m.State("COUNT_LO"):
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        m.d.sync += [count_lo.eq(self.i.payload), lo_zero.eq(self.i.payload == 0)]
                        m.next = "COUNT_HI"
            with m.State("COUNT_HI"):
                m.d.comb += waiting.eq(1)
                n = Cat(count_lo, self.i.payload)
                n_zero = lo_zero & (self.i.payload == 0)
                with m.If(expired):
                    give_up()
                with m.Else():
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        m.d.sync += [beats.eq(n), one_left.eq(n == 1), byte_idx.eq(0),
                                     idx_last.eq(one_byte)]
                        with m.If(is_info):
                            answer(2 + len(info), AFTER_STATUS)
                        with m.Elif(is_reset):
                            m.d.comb += self.soft_reset.eq(1)
                            m.d.sync += [valid.eq(0) for valid in valids.values()]
                            m.d.sync += [done.eq(0) for done in dones.values()]
                            m.d.sync += [go.eq(0) for go in gos.values()]
                            answer(1, AFTER_STATUS)
                        with m.Elif(is_write):
                            with m.If(n_zero):
                                m.next = "DRAIN"
                            with m.Else():
                                m.next = "RECV"
                        with m.Elif(is_read):
                            answer(1, Mux(n_zero, AFTER_STATUS, AFTER_LOAD))
                        with m.Elif(is_status):
                            answer(1 + self.status_bytes, AFTER_STATUS)
                        with m.Else():
                            raise_flag(Status.BAD_OP)
                            answer(1, AFTER_STATUS)
            with m.State("RECV"):
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        m.d.sync += [wb_data.eq(self.i.payload),
                                     wb_lo.eq(C(1, 8) << byte_idx[:3]),
                                     wb_hi.eq(C(1, len(wb_hi)) << byte_idx[3:])]
                        with m.If(idx_last):
                            m.d.sync += [byte_idx.eq(0), idx_last.eq(one_byte),
                                         beats.eq(beats - 1), one_left.eq(beats == 2),
                                         last_1.eq(one_left)]
                            for k, name in enumerate(writes):
                                m.d.sync += dones[name].eq(which == k)
                            with m.If(one_left):
                                m.d.sync += drained.eq(0)
                                m.next = "DRAIN"
                        with m.Else():
                            m.d.sync += [byte_idx.eq(byte_idx + 1),
                                         idx_last.eq(before_end)]
            with m.State("DRAIN"):
                # The command's last beat has arrived; answer once it has been taken.
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    with m.If(drained):
                        answer(1, AFTER_STATUS)
            with m.State("LOAD"):
                m.d.comb += waiting.eq(1)
                with m.If(expired):
                    give_up()
                with m.Else():
                    with m.Switch(which):
                        for k, name in enumerate(reads):
                            port = getattr(self, name)
                            with m.Case(k):
                                m.d.comb += port.ready.eq(1)
                                with m.If(port.valid):
                                    m.d.sync += [beats.eq(beats - 1), one_left.eq(beats == 2)]
                                    answer(fr[name].read_bytes, Mux(one_left, AFTER_STATUS, AFTER_LOAD),
                                           rd=True)
            with m.State("SEND"):
                with m.If(self.o.ready):
                    m.d.sync += [tx_left.eq(tx_left - 1), tx_one.eq(tx_left == 2)]
                    with m.If(tx_one):
                        with m.Switch(after):
                            with m.Case(AFTER_IDLE):
                                m.next = "IDLE"
                            with m.Case(AFTER_STATUS):
                                m.next = "STATUS"
                            with m.Case(AFTER_LOAD):
                                m.next = "LOAD"
            with m.State("STATUS"):
                # The status byte: the flags collected so far, which start again from here.
                m.d.sync += [flags.eq(set_flags), fl_byte.eq(flags | set_flags)]
                answer(1, AFTER_IDLE, fl=True)

        # ``an_en`` and ``rd_en`` are the registers' enables, as flops of their own: while the
        # register is not being sent (load) or one cycle after a byte of it was taken (shift).
        sent_last = self.o.ready & tx_one
        an_next, rd_next = start_an | tx_an & ~sent_last, start_rd | tx_rd & ~sent_last
        an_en, rd_en = Signal(init=1), Signal(init=1)
        m.d.sync += [tx_an.eq(an_next), tx_rd.eq(rd_next), tx_fl.eq(start_fl | tx_fl & ~sent_last),
                     an_en.eq(~an_next | tx_an & self.o.ready), rd_en.eq(~rd_next | tx_rd & self.o.ready)]
        m.d.comb += [self.o.valid.eq(tx_an | tx_rd | tx_fl),
                     self.o.payload.eq(Mux(tx_rd, rd_byte, Mux(tx_fl, fl_byte, an_byte)))]
        body = Mux(is_info, C(len(info) | int.from_bytes(info, "little") << 8, 8 + 8 * len(info)), 0)
        if self._status_bits:
            body = body | Mux(is_status, self.status, 0)
        with m.If(an_en):
            m.d.sync += an_sr.eq(Mux(tx_an, an_sr >> 8, Cat(header(), body)))
        wires = []
        for name in reads:
            f, port = fr[name], getattr(self, name)
            d, u, last = _split(port.payload)
            tail = Cat(*(v for v in (u, last) if v is not None))
            wires.append(Cat(d, C(0, 8 * f.data_bytes - f.data_bits), tail))
        if wires:
            beat = Array(wires)[which] if len(wires) > 1 else wires[0]
            with m.If(rd_en):
                m.d.sync += rd_sr.eq(Mux(tx_rd, rd_sr >> 8, beat))
        m.d.comb += [self.busy.eq(~fsm.ongoing("IDLE")), loading.eq(fsm.ongoing("LOAD")),
                     accepting.eq(fsm.ongoing("COUNT_LO") | fsm.ongoing("COUNT_HI") | fsm.ongoing("RECV"))]
        return m
