"""TAS of all rows of a group in parallel: one fabric dot-product engine per row, no DSP."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.layouts import tas_row_layout
from hw.lib.ff_copies import ff_copies
from hw.lib.mult18 import is_ecp5
from hw.lib.widths import index_bits, mul_const
from sw.spec import quant

__all__ = ["TasGroup", "group_decision_layout", "and_pair_init"]

#: Bits of a ``k`` element: an engine takes one bit plane of ``k`` per step.
_PLANES = 8


def group_decision_layout(batch):
    """One decision of :class:`TasGroup`: the row it belongs to, its TAS and the replay bit."""
    return data.StructLayout({"row": index_bits(batch), "tas": signed(quant.ACC_BITS), "replay": 1})


def and_pair_init():
    """``INIT`` of one CCU2C half that adds ``(A & B) + (C & D) + carry``.

    The LUT4 gives the propagate ``(A & B) ^ (C & D)``; with ``INJECT1 = "NO"`` the generate is
    the LUT2 on ``A, B`` (the LUT4's ``INIT[3:0]``, that is with ``C = D = 0``): ``A & B``, which is
    the carry out whenever the propagate is 0. So the two AND gates of a partial-product pair cost
    nothing beyond the adder.
    """
    init = 0
    for idx in range(16):
        a, b, c, d = (idx >> 0) & 1, (idx >> 1) & 1, (idx >> 2) & 1, (idx >> 3) & 1
        init |= ((a & b) ^ (c & d)) << idx
    return init


def _and_pair_ccu2c(m, name, x, bx, y, by):
    """``(bx ? x : 0) + (by ? y : 0)`` for signed 8-bit ``x``, ``y`` as a chain of hand-placed
    CCU2C (9 result bits: the sign extension is one more slice of the same form)."""
    n = len(x) + 1
    xs, ys = Cat(x, x[-1]), Cat(y, y[-1])
    out = Signal(signed(n), name=f"{name}_s")
    carry = Const(0)
    init = and_pair_init()
    for k in range(0, n, 2):
        s0, s1 = Signal(name=f"{name}_s{k}"), Signal(name=f"{name}_s{k + 1}")
        cout = Signal(name=f"{name}_c{k}")
        second = k + 1 < n
        m.submodules[f"{name}_{k // 2}"] = Instance(
            "CCU2C",
            p_INIT0=Const(init, 16), p_INIT1=Const(init if second else 0, 16),
            p_INJECT1_0="NO", p_INJECT1_1="NO",
            i_CIN=carry,
            i_A0=xs[k], i_B0=bx, i_C0=ys[k], i_D0=by,
            i_A1=xs[k + 1] if second else Const(0), i_B1=bx if second else Const(0),
            i_C1=ys[k + 1] if second else Const(0), i_D1=by if second else Const(0),
            o_S0=s0, o_S1=s1, o_COUT=cout,
        )
        m.d.comb += out[k].eq(s0)
        if second:
            m.d.comb += out[k + 1].eq(s1)
        carry = cout
    return out


class TasGroup(wiring.Component):
    """Integer TAS and replay decision of the ``batch`` rows of a group, in parallel, without DSPs.

    Row ``b`` of a group always runs on engine ``b``. Each engine computes
    ``tas = sum_e q[e] * k[e]`` (:func:`sw.spec.quant.tas_int`) bit-serially, ``lanes`` one-bit
    products per cycle for ``8 * dim / lanes`` steps, then takes the decision of
    :func:`sw.spec.quant.replay_decision` with the drift guard of ``sw/golden``, bit for bit::

        want    = frame != 0 and tas >= threshold          (sw.spec.quant.replay_decision)
        force   = refresh (frame % refresh_every == 0, when enabled)
                  or chain[layer, index, row] >= max_chain (when enabled)
        replay  = want and not force
        chain   = replay ? chain + 1 : 0                  (when max_chain is enabled; frame 0 writes 0)

    The refresh phase advances when the frame number changes (one phase for all engines), so rows
    arrive in decode order.

    **Datapath.** A row's beat is registered whole (no enable). The engine of its row loads it the
    next cycle into registers of its own, beside its adders, and holds it for the row's
    ``8 * dim / lanes`` steps: no delay line and no operand select shared by the engines. Each
    step adds the one-bit products ``(k[e] bit j) ? q[e] : 0`` of ``lanes`` elements, one bit
    plane ``j`` of ``k`` at a time, 7 (the sign, weight ``-2**7``) first: the ``k`` registers shift
    a bit at the end of each plane, and with fewer lanes than ``dim`` the row's chunks rotate
    through the lanes. The products of two lanes are added in one carry chain whose LUTs also form
    the AND gates (:func:`and_pair_init`; on the ECP5 these are hand-placed ``CCU2C``, elsewhere
    ``+``); the adder tree sums the ``lanes / 2`` pair sums with a register after every
    ``adds_per_stage`` adder levels, and the accumulator takes them Horner's way: the sum so far
    doubles at the start of each plane, plane 7's sums are subtracted (an add or a subtract, not a
    negation in series with the add). A cycle after the last step each engine registers its TAS
    and its replay bit, whose comparison is the sign of ``tas - threshold`` (threshold clamped to
    the TAS range, which changes no comparison) taken from the accumulator in that cycle.

    **Chain counters.** Engine ``b`` owns the counters of row ``b``: a memory of
    ``layers * tokens_per_frame`` words (distributed RAM, read into a register), read three
    cycles before the decision is registered (the max-chain test registered between) and written
    from the decision's registers. An engine takes a new row ``steps`` (at least 8) cycles after
    the previous one, so a read never misses the previous write of its own row.

    **Output.** The row's TAS and replay bit, selected from the engines' registers (a cycle after
    the last step), go out in that cycle if the queue is empty and ``o.ready`` is high, into the
    queue otherwise; ``o`` shows the queue's head while it holds one. Decisions leave in the order
    the rows arrived (all engines have the same latency). The input takes a row only while the
    queue has room for every row in flight (a credit count), so the pipeline never stalls and
    ``o.ready`` drives only the queue and the count. ``o`` is not registered here: the
    accelerator puts a register slice after it (``SkidBuffer``, ``"full"``), which the placer can
    put beside the consumer.

    Parameters
    ----------
    dim : int
        ``heads * head_dim``; a multiple of ``lanes``.
    layers, tokens_per_frame, batch : int
        Group geometry: ``batch`` engines, each with ``layers * tokens_per_frame`` chain counters.
    lanes : int
        One-bit products per cycle per engine (``sw.config.AccelConfig.tas_lanes``).
    frame_bits, chain_bits : int
        Widths of the frame number and of a chain counter.
    adds_per_stage : int
        Adder levels between two pipeline registers: 1 (default; two levels per cycle reach only
        119 MHz in ``python -m hw.flow.timing tas_group`` with the engines of 16 lanes, their
        routing dominated) or 2 (latency 4 cycles shorter by default).
    primitive : bool or None
        ``True`` forces the ``CCU2C`` instances, ``False`` the ``+`` model; ``None`` (default) picks
        the instances exactly when the platform is an ECP5.

    Members
    -------
    i : In(stream.Signature(hw.accel.layouts.tas_row_layout(...)))
        One row per beat. ``i.ready`` is high while the engine of ``i.payload.row`` is free and the
        output has room (it depends on ``i.payload.row``).
    o : Out(stream.Signature(group_decision_layout(batch)))
        The decisions in arrival order; ``o.valid`` and ``o.payload`` come from the queue or the
        engines' registers through a select.
    refresh_en, refresh_every, max_chain_en, max_chain : In
        Drift-guard configuration (static while rows flow).
    queue_level : Out(range(latency + 1))
        Decisions waiting in the output queue (for coverage counts; nothing else reads it).

    Attributes
    ----------
    latency : int
        Cycles from a row's beat on ``i`` (the cycle with ``valid`` and ``ready`` high) to the
        cycle its decision is on ``o`` (with ``o.ready`` high and nothing queued):
        ``steps + tree_stages + 3``.
    steps : int
        ``8 * dim // lanes``: bit planes times chunks.
    occupancy : int
        Cycles between two rows taken by the same engine.
    """

    def __init__(self, dim, layers, tokens_per_frame, batch, *, lanes=16, frame_bits=8, chain_bits=8,
                 adds_per_stage=1, primitive=None):
        for name, v in (("dim", dim), ("layers", layers), ("tokens_per_frame", tokens_per_frame),
                        ("batch", batch), ("lanes", lanes), ("frame_bits", frame_bits),
                        ("chain_bits", chain_bits)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"TasGroup {name} must be a positive integer, not {v!r}")
        if dim % lanes:
            raise ValueError(f"TasGroup dim={dim} is not a multiple of lanes={lanes}")
        if layers * tokens_per_frame < 2:
            raise ValueError(f"TasGroup needs layers * tokens_per_frame >= 2 chain counters, not "
                             f"{layers * tokens_per_frame!r}")
        if adds_per_stage not in (1, 2):
            raise ValueError(f"TasGroup adds_per_stage must be 1 or 2, not {adds_per_stage!r}")
        if primitive not in (None, True, False):
            raise TypeError(f"TasGroup primitive must be None, True or False, not {primitive!r}")
        quant.check_accumulator(dim, what="TAS dim")
        self._dim, self._lanes, self._batch = dim, lanes, batch
        self._layers, self._n = layers, tokens_per_frame
        self._chain_bits, self._adds = chain_bits, adds_per_stage
        self._primitive_choice = primitive
        self._layout = tas_row_layout(dim, layers, tokens_per_frame, batch, frame_bits)
        # Adder levels: the paired partial-product rows of one bit plane, the tree over the
        # lanes / 2 pair sums (the one row for one lane), then the accumulator.
        items = (lanes + 1) // 2
        total = 1 + max(0, (items - 1).bit_length()) + 1
        self._levels = total
        self._tree_stages = -(-total // adds_per_stage) - 1
        super().__init__({
            "i": In(stream.Signature(self._layout)),
            "o": Out(stream.Signature(group_decision_layout(batch))),
            "refresh_en": In(1), "refresh_every": In(frame_bits),
            "max_chain_en": In(1), "max_chain": In(chain_bits),
            "queue_level": Out(range(self._decide + 2)),
        })

    @property
    def steps(self) -> int:
        """Cycles of one row in an engine: 8 bit planes of ``dim / lanes`` chunks each."""
        return _PLANES * (self._dim // self._lanes)

    @property
    def occupancy(self) -> int:
        return self.steps

    @property
    def tree_stages(self) -> int:
        """Registered adder stages between an engine's operand register and its accumulator."""
        return self._tree_stages

    @property
    def latency(self) -> int:
        return self._decide + 1

    @property
    def _decide(self):
        # Cycle (after the beat) in which the accumulators hold a row's TAS: the beat's register
        # (1), the engine's row registers (2), the tree stages, then the accumulator adds of the
        # steps.
        return self.steps + self._tree_stages + 2

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        use_prim = is_ecp5(platform) if self._primitive_choice is None else self._primitive_choice
        B, P, S = self._batch, self._lanes, self.steps
        D = self._decide
        sb = quant.sum_bits(self._dim)
        depth = self._layers * self._n
        queue_depth = self.latency

        # ---- input: credits and engine occupancy ------------------------------------------------
        room = Signal(init=1)
        free = Signal(B, init=(1 << B) - 1)
        busy = [Signal(range(self.occupancy), name=f"busy_{b}") for b in range(B)]
        m.d.comb += self.i.ready.eq(room & free.bit_select(self.i.p.row, 1))
        take = Signal()
        m.d.comb += take.eq(self.i.valid & self.i.ready)
        take_b = [Signal(name=f"take_{b}") for b in range(B)]
        for b in range(B):
            m.d.comb += take_b[b].eq(take & (self.i.p.row == b))
            nxt = Signal.like(busy[b], name=f"busy_next_{b}")
            with m.If(take_b[b]):
                m.d.comb += nxt.eq(self.occupancy - 1)
            with m.Elif(busy[b] != 0):
                m.d.comb += nxt.eq(busy[b] - 1)
            with m.Else():
                m.d.comb += nxt.eq(0)
            m.d.sync += [busy[b].eq(nxt), free[b].eq(nxt == 0)]

        # ---- stage 1: the beat, registered whole, no enable ------------------------------------
        row_in = Signal(self._layout, name="row_in")
        valid_in = Signal()
        m.d.sync += [row_in.eq(self.i.p), valid_in.eq(take)]
        in_take = [Signal(name=f"in_take_{b}") for b in range(B)]
        for b in range(B):
            m.d.sync += in_take[b].eq(take_b[b])

        # ---- the shared metadata pipeline (one row per cycle at most, all the same latency) ----
        # pipe[c] holds the fields of the row taken c cycles before (stage 1 is row_in).
        def delay(sig, frm, to, name):
            """``sig`` (valid in stage ``frm``) as seen in stage ``to``."""
            cur = sig
            for c in range(frm + 1, to + 1):
                r = Signal.like(sig, name=f"{name}_{c}", reset_less=True)
                m.d.sync += r.eq(cur)
                cur = r
            return cur

        # Frame bookkeeping (stage 1 -> 2) and the refresh phase (stage 2 -> 3 -> 4).
        last_frame = Signal.like(row_in.frame)
        seen = Signal()
        fz2, chg2, v2 = Signal(), Signal(), Signal()
        m.d.sync += [fz2.eq(row_in.frame == 0), chg2.eq(~seen | (row_in.frame != last_frame)),
                     v2.eq(valid_in)]
        with m.If(valid_in):
            m.d.sync += [last_frame.eq(row_in.frame), seen.eq(1)]
        phase = Signal.like(self.refresh_every)
        every_m1 = Signal(signed(len(self.refresh_every) + 1))
        m.d.sync += every_m1.eq(self.refresh_every - 1)
        with m.If(v2):
            with m.If(fz2):
                m.d.sync += phase.eq(0)
            with m.Elif(chg2):
                m.d.sync += phase.eq(Mux(phase >= every_m1, 0, phase + 1))
        ph0_4 = Signal()
        m.d.sync += ph0_4.eq(phase == 0)

        # Threshold clamped to the TAS range (no comparison changes), negated: the threshold
        # registered alone (stage 2, a plain wire from the wide row register), the comparisons with
        # the bounds and the negation (3), the clamp (4).
        lo, hi = -(1 << (sb - 1)), 1 << (sb - 1)
        thr = Signal.like(row_in.threshold, name="thr", reset_less=True)
        m.d.sync += thr.eq(row_in.threshold)
        neg_t = Signal(signed(sb + 2), reset_less=True)
        below3, above3 = Signal(reset_less=True), Signal(reset_less=True)
        m.d.sync += [neg_t.eq(-thr), below3.eq(thr < lo), above3.eq(thr > hi)]
        neg_thr = Signal(signed(sb + 2), reset_less=True)
        m.d.sync += neg_thr.eq(Mux(below3, -lo, Mux(above3, -hi, neg_t)))        # stage 4
        # Each engine latches it in stage ``thr_stage`` of its row: its first step's, or stage 4.
        thr_stage = max(2 + self._tree_stages, 4)
        neg_thr_acc = delay(neg_thr, 4, thr_stage, "neg_thr")

        addr2 = Signal(range(depth), reset_less=True)
        m.d.sync += addr2.eq(mul_const(row_in.layer, self._n) + row_in.index)

        valid_d = delay(valid_in, 1, D, "valid")
        row_d = delay(row_in.row, 1, D, "row")
        fnz_d = delay(~fz2, 2, D, "fnz")
        addr_pre = delay(addr2, 2, D - 3, "addr")
        row_pre = delay(row_in.row, 1, D - 3, "row_pre")
        valid_pre = delay(valid_in, 1, D - 3, "valid_pre")
        row_rd = delay(row_in.row, 1, D, "row_rd")

        # ---- engines ------------------------------------------------------------------------
        accs, diffs = [], []
        for b in range(B):
            acc, diff = self._engine(m, platform, b, row_in, in_take[b], free[b],
                                     (neg_thr_acc, thr_stage), use_prim, sb)
            accs.append(acc)
            diffs.append(diff)

        # ---- chain counters: one memory per engine, read registered ---------------------------
        cnt_bank = []
        write_ports = []
        addr_bs = []
        for b in range(B):
            # Distributed RAM: Yosys would otherwise fold the read register into a DP16KD
            # without its output register (and the block RAMs are all taken).
            mem = memory.Memory(shape=unsigned(self._chain_bits), depth=depth, init=[],
                                attrs={"ram_style": "distributed"})
            m.submodules[f"chain_{b}"] = mem
            rd = mem.read_port(domain="comb")
            wr = mem.write_port()
            data_r = Signal(self._chain_bits, name=f"chain_rd_{b}", reset_less=True)
            # The engine's own copy of the address (stage D - 2), loaded only when its row passes
            # (a valid one: the stages also carry the fields of beats not taken),
            # so that each memory's address comes from a register beside it: read in stage D - 2
            # (used only for its own rows) and written in stage D + 1, before its next row (at
            # least 8 cycles later) can change it.
            addr_b = Signal.like(addr_pre, name=f"chain_addr_{b}", reset_less=True)
            with m.If(valid_pre & (row_pre == b)):
                m.d.sync += addr_b.eq(addr_pre)
            m.d.comb += rd.addr.eq(addr_b)
            addr_bs.append(addr_b)
            m.d.sync += data_r.eq(rd.data)                                        # stage D - 1
            cnt_bank.append(data_r)
            write_ports.append(wr)
        # ---- decision (registered in stage D + 1) -------------------------------------------
        # Each engine decides for its own row, beside it: the sign of ``tas - threshold`` (its
        # accumulator and latched threshold, stage D), the max-chain test of its counter
        # (registered in stage D) and the refresh phase make its replay bit, registered with its TAS and the
        # counter + 1 in stage D + 1; in that stage it writes its own counter from those registers
        # (no select on the write path). The decision of row ``row_o`` is then a select of the
        # engines' registers, which the output and the queue take.
        rf_d = Signal(reset_less=True)
        m.d.sync += rf_d.eq(self.refresh_en & delay(ph0_4, 4, D - 1, "ph0"))     # stage D
        valid_rd = delay(valid_in, 1, D, "valid_rd")
        replays, tas_r = [], []
        for b in range(B):
            stop = Signal(name=f"chain_stop_{b}", reset_less=True)                     # stage D
            m.d.sync += stop.eq(self.max_chain_en & (cnt_bank[b] >= self.max_chain))
            cnt_inc = Signal(self._chain_bits, name=f"chain_inc_{b}", reset_less=True)
            wen = Signal(name=f"chain_wen_{b}")
            replay_b = Signal(name=f"replay_{b}", reset_less=True)
            t = Signal(signed(sb), name=f"tas_r_{b}", reset_less=True)
            m.d.sync += [cnt_inc.eq(cnt_bank[b] + 1),
                         wen.eq(self.max_chain_en & valid_rd & (row_rd == b)),
                         replay_b.eq(fnz_d & ~diffs[b][-1] & ~rf_d & ~stop),
                         t.eq(accs[b])]
            replays.append(replay_b)
            tas_r.append(t)
            wr = write_ports[b]
            m.d.comb += [wr.addr.eq(addr_bs[b]), wr.data.eq(Mux(replay_b, cnt_inc, 0)), wr.en.eq(wen)]
        row_o = delay(row_d, D, D + 1, "row_o")
        valid_o = Signal(name="valid_o")
        m.d.sync += valid_o.eq(valid_d)

        # The row's decision (stage D + 1), selected from the engines' registers.
        dec_layout = data.StructLayout({"row": len(row_o), "tas": signed(sb), "replay": 1})
        dec = Signal(dec_layout)
        valid_q = Signal(name="valid_q")
        m.d.comb += [dec.row.eq(row_o), dec.tas.eq(Array(tas_r)[row_o]),
                     dec.replay.eq(Array(replays)[row_o]), valid_q.eq(valid_o)]

        # ---- output: the queue, passed by while it is empty; credits ---------------------------
        # The row's decision goes out in its own cycle when the queue is empty and ``o.ready`` is
        # high, into the queue otherwise; ``o`` shows the queue's head while it holds one. The
        # accelerator registers ``o`` in a register slice (hw.lib.skid.SkidBuffer, "full"), so
        # ``o.ready`` is a flop and ``o`` drives only that slice's registers.
        m.submodules.queue = queue = fifo.SyncFIFO(width=len(dec.as_value()), depth=queue_depth)
        m.d.comb += self.queue_level.eq(queue.level)
        head = Signal.like(dec)
        m.d.comb += head.eq(queue.r_data)
        m.d.comb += [queue.w_data.eq(dec), queue.w_en.eq(valid_q & ~(self.o.ready & ~queue.r_rdy)),
                     queue.r_en.eq(self.o.ready & queue.r_rdy)]
        m.d.comb += [self.o.valid.eq(queue.r_rdy | valid_q),
                     self.o.p.row.eq(Mux(queue.r_rdy, head.row, dec.row)),
                     self.o.p.tas.eq(Mux(queue.r_rdy, head.tas, dec.tas)),
                     self.o.p.replay.eq(Mux(queue.r_rdy, head.replay, dec.replay))]

        # The room is ``count + take - gone < cap``, written as a choice between comparisons of the
        # count register alone, so that the handshakes only select. A decision that leaves is
        # counted a cycle later (``gone`` registered: the output's valid is a select of the
        # queue's state), so the count is at most one above the rows held: never too low.
        cap = queue_depth
        count = Signal(range(cap + 1))
        gone = Signal()
        lt_cap, lt_cap1 = Signal(), Signal()
        m.d.sync += gone.eq(self.o.valid & self.o.ready)
        m.d.comb += [lt_cap.eq(count < cap), lt_cap1.eq(count < cap - 1)]
        m.d.sync += [count.eq(count + take - gone),
                     room.eq(Mux(take, Mux(gone, lt_cap, lt_cap1), gone | lt_cap))]
        return m

    # ------------------------------------------------------------------------------------------
    def _engine(self, m, platform, b, row_in, in_take, free_b, thr, use_prim, sb):
        """Engine ``b``: its row's registers, one bit plane's partial products, the adder tree and
        the accumulator (Horner over the bit planes, most significant first)."""
        P, C, S = self._lanes, self._dim // self._lanes, self.steps
        # The registers load ``row_in`` in every cycle but those in which they hold a row whose
        # steps need them (stages 2 to ``steps``); the cycle of the engine's take (stage 1) is
        # never one of those, its previous row being at least ``steps`` cycles older. Those are
        # exactly the cycles after the ones in which the input's ``free`` flag of the engine is
        # low (stages 1 to ``steps - 1``), so the load enable is ``free`` registered: a copy per
        # pair of lanes (:func:`hw.lib.ff_copies.ff_copies`), each placed beside its lanes, fed
        # straight from the one flip-flop (no logic between them).
        pairs = (P + 1) // 2
        loads = ff_copies(m, platform, free_b, pairs, f"e{b}_load", init=1)
        # The row's registers, chunk c of ``lanes`` elements each; chunk 0 is the one a step reads.
        # They load in stage 1 (so chunk 0 holds the row's chunk 0 in stage 2), then rotate by a
        # chunk each cycle; the chunk that wraps around shifts its ``k`` by a bit, so chunk 0's
        # top ``k`` bits run through the planes, 7 first.
        qr = [[Signal(signed(8), name=f"e{b}_q{c}_{ln}", reset_less=True) for ln in range(P)]
              for c in range(C)]
        kr = [[Signal(8, name=f"e{b}_k{c}_{ln}", reset_less=True) for ln in range(P)] for c in range(C)]
        for c in range(C):
            for ln in range(P):
                load = loads[ln // 2]
                e = c * P + ln
                if C == 1:
                    with m.If(load):
                        m.d.sync += qr[c][ln].eq(row_in.q[e])
                else:
                    m.d.sync += qr[c][ln].eq(Mux(load, row_in.q[e], qr[(c + 1) % C][ln]))
                k_next = kr[c + 1][ln] if c + 1 < C else (kr[0][ln] << 1)[:8]
                m.d.sync += kr[c][ln].eq(Mux(load, row_in.k[e], k_next))
        qs = qr[0]
        kbit = [kr[0][ln][_PLANES - 1] for ln in range(P)]

        # Level 1: partial-product rows (k bit) ? q : 0 of two lanes added (CCU2C with the ANDs).
        items = []                      # (value, shift, negative)
        for ln in range(0, P, 2):
            if ln + 1 < P:
                name = f"e{b}_pp_{ln}"
                if use_prim:
                    v = _and_pair_ccu2c(m, name, qs[ln], kbit[ln], qs[ln + 1], kbit[ln + 1])
                else:
                    v = Mux(kbit[ln], qs[ln], 0) + Mux(kbit[ln + 1], qs[ln + 1], 0)
            else:
                v = Mux(kbit[ln], qs[ln], 0)
            items.append((v, 0, False))

        level = 1
        stage_after = {k for k in range(1, self._levels) if (self._levels - k) % self._adds == 0}

        def stage(items, level):
            if level not in stage_after:
                return items
            out = []
            for n, (v, s, neg) in enumerate(items):
                r = Signal(signed(len(v)), name=f"e{b}_l{level}_{n}", reset_less=True)
                m.d.sync += r.eq(v)
                out.append((r, s, neg))
            return out

        items = stage(items, level)
        while len(items) > 1:
            nxt = []
            for n in range(0, len(items), 2):
                if n + 1 == len(items):
                    nxt.append(items[n])
                    continue
                (x, sx, nx), (y, sy, ny) = items[n], items[n + 1]
                nxt.append((x.as_signed() + y.as_signed(), 0, False))
            items = nxt
            level += 1
            items = stage(items, level)
        partial = items[0][0].as_signed()

        # The step's place among the planes, from counters that restart with the row (their
        # values in stage 2, the row's first step): ``neg`` in plane 7 (the sign bit's weight is
        # -2**7), ``dbl`` at the first chunk of every later plane (Horner: the sum so far doubles).
        # The flags then follow the row's partial sums down the tree.
        chunk = Signal(range(max(C, 2)), name=f"e{b}_chunk")
        plane = Signal(range(_PLANES), name=f"e{b}_plane")
        if C > 1:
            m.d.sync += chunk.eq(Mux(in_take, 0, Mux(chunk == C - 1, 0, chunk + 1)))
        wrap = chunk == C - 1 if C > 1 else Const(1)
        m.d.sync += plane.eq(Mux(in_take, 0, Mux(wrap, plane + 1, plane)))
        first, neg, dbl = Signal(name=f"e{b}_first_0"), Signal(name=f"e{b}_neg_0"), Signal(name=f"e{b}_dbl_0")
        m.d.sync += [first.eq(in_take), neg.eq(in_take | ((plane == 0) & ~wrap)),
                     dbl.eq(~in_take & wrap)]
        for n in range(self._tree_stages):
            f2, n2, d2 = (Signal(name=f"e{b}_{x}_{n + 1}") for x in ("first", "neg", "dbl"))
            m.d.sync += [f2.eq(first), n2.eq(neg), d2.eq(dbl)]
            first, neg, dbl = f2, n2, d2

        # The accumulator: the TAS. Beside it, ``tas - threshold`` is registered a cycle after the
        # last step (its sign is the comparison), from the threshold this engine latched with its
        # row's first step.
        acc = Signal(signed(sb), name=f"e{b}_acc", reset_less=True)
        prev = Mux(first, 0, Mux(dbl, acc << 1, acc))
        # Add or subtract: two carry chains side by side and a select (or one chain whose ``B``
        # is inverted), not a negation chain in series with the sum's.
        m.d.sync += acc.eq(Mux(neg, prev - partial, prev + partial))
        neg_thr, thr_stage = thr
        latch = in_take
        for n in range(thr_stage - 1):
            r = Signal(name=f"e{b}_thr_en_{n}")
            m.d.sync += r.eq(latch)
            latch = r
        thr_b = Signal.like(neg_thr, name=f"e{b}_neg_thr", reset_less=True)
        with m.If(latch):
            m.d.sync += thr_b.eq(neg_thr)
        diff = Signal(signed(sb + 2), name=f"e{b}_diff")
        m.d.comb += diff.eq(acc + thr_b)
        return acc, diff
