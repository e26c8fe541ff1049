"""The weight store: every MLP weight block in DP16KD block RAM, read by two cores at once.

One block is the ``mv_out x mv_in`` int8 weights one core's matrix-vector unit consumes in a cycle.
The store is ``lanes = mv_in * mv_out / 2`` columns of true dual-port DP16KD (1,024 x 18 bits, two
weights per word) side by side, ``banks`` of them deep per column: 32 x 5 = 160 DP16KD for the
default configuration. Core 0 reads on port A, core 1 on port B; writes (configuration time) use
port A. Where each weight of a block sits is :func:`weight_position`, the one place that says so;
:func:`block_to_words` and :func:`words_to_block` (for the host packer) and the hardware use it.
"""

import math

import numpy as np
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.lib.bram import BramTdp
from hw.lib.mult18 import is_ecp5
from sw.config import AccelConfig

__all__ = ["BANK_WORDS", "WORD_BITS", "HALF_BITS", "WeightStore", "bank_count", "weight_position",
           "block_to_words", "words_to_block"]

#: Words of one DP16KD in its 18-bit configuration, and the word and half-word widths.
BANK_WORDS, WORD_BITS, HALF_BITS = 1024, 18, 9


def bank_count(cfg: AccelConfig) -> int:
    """DP16KD per lane of the weight store: ``mv_weight_blocks`` words, 1,024 per bank."""
    return -(-cfg.mv_weight_blocks // BANK_WORDS)


def weight_position(n: int, k: int, mv_in: int) -> tuple[int, int]:
    """``(lane, half)`` of weight ``(n, k)`` (output ``n``, input ``k``) of a block with ``mv_in``
    inputs: lane ``n * mv_in / 2 + k / 2``, half ``k % 2`` (bits 0..8 for even ``k``, 9..17 for odd
    ``k``, each the int8 weight sign-extended to 9 bits)."""
    if not isinstance(mv_in, int) or mv_in < 2 or mv_in % 2:
        raise ValueError(f"mv_in must be an even integer of at least 2, not {mv_in!r}")
    if not 0 <= k < mv_in:
        raise ValueError(f"input index k must be in 0..{mv_in - 1}, not {k!r}")
    if n < 0:
        raise ValueError(f"output index n must not be negative, not {n!r}")
    return n * (mv_in // 2) + k // 2, k % 2


def block_to_words(block) -> list[int]:
    """The ``mv_in * mv_out / 2`` words of 18 bits (one per lane, lane order) of ``block``, an int8
    array of shape ``[mv_out, mv_in]``."""
    block = np.asarray(block)
    if block.ndim != 2:
        raise ValueError(f"block must be a 2-d array [mv_out, mv_in], not shape {block.shape!r}")
    if block.size and (block.min() < -128 or block.max() > 127):
        raise ValueError(f"block weights must be int8 (-128..127), not {block.min()}..{block.max()}")
    mv_out, mv_in = block.shape
    words = [0] * (mv_out * mv_in // 2)
    for n in range(mv_out):
        for k in range(mv_in):
            lane, half = weight_position(n, k, mv_in)
            words[lane] |= (int(block[n, k]) & ((1 << HALF_BITS) - 1)) << (half * HALF_BITS)
    return words


def words_to_block(words, mv_in: int, mv_out: int) -> np.ndarray:
    """The inverse of :func:`block_to_words`: the int8 ``[mv_out, mv_in]`` block held in ``words``.
    A half whose ninth bit is not the sign of its int8 raises :class:`ValueError`."""
    words = list(words)
    if len(words) != mv_out * mv_in // 2:
        raise ValueError(f"a {mv_out} x {mv_in} block takes {mv_out * mv_in // 2} words, not {len(words)}")
    block = np.zeros((mv_out, mv_in), dtype=np.int8)
    for n in range(mv_out):
        for k in range(mv_in):
            lane, half = weight_position(n, k, mv_in)
            w = words[lane]
            if not isinstance(w, (int, np.integer)) or not 0 <= w < (1 << WORD_BITS):
                raise ValueError(f"word {lane} must be an integer in 0..{(1 << WORD_BITS) - 1}, not {w!r}")
            v = (int(w) >> (half * HALF_BITS)) & ((1 << HALF_BITS) - 1)
            v -= (v >> (HALF_BITS - 1)) << HALF_BITS
            if not -128 <= v <= 127:
                raise ValueError(f"word {lane} half {half} is {v}, not a sign-extended int8")
            block[n, k] = v
    return block


class WeightStore(wiring.Component):
    """All weight blocks of every layer and chunk, two independent read ports, one block per cycle each.

    Read pipeline (``latency = 6``), the same for both ports, one register stage per cycle, no
    signal driving more than a few dozen inputs and no more than one LUT level between the banks'
    words and a register:

    * end of t: ``r_addr[p]`` (row within a bank and one-hot bank) into ``trunks`` *trunk* copies;
    * end of t + 1: each trunk copy into the *group* copies it serves, one per ``lanes_per_copy``
      lanes, next to those lanes' DP16KD (a group copy drives ``lanes_per_copy * banks`` address
      inputs);
    * end of t + 2: the DP16KD captures the row; at the end of t + 3 its output register (``OUTREG``)
      holds the word;
    * the one-hot bank rides along in per-lane registers; at the end of t + 4 each pair of banks'
      words is selected into a register, ``word[b] & sel[b] | word[b + 1] & sel[b + 1]`` (one LUT4
      per bit, next to the two banks); at the end of t + 5 the OR of those partial words goes into
      the lane's output register, so ``r_data[p]`` shows block ``r_addr[p]`` in cycle t + 6. (A
      lane's banks lie up to 30 columns apart along a block-RAM row; the select in one cycle, two
      LUT levels with a route across that span between them, reached only 144 MHz.)

    A new address every cycle on each port; the ports never wait for each other, and both may read
    the same block.

    Write: a beat on ``w`` (``valid`` high in cycle t; always ready) follows port A's address path
    (its data one register per lane at the end of t and again at the end of t + 1) and is written
    into port A of the addressed bank of every lane at the end of t + 2; reads presented from cycle
    t + 1 on see it. The write takes port A in that cycle: core 0's read presented in the same cycle
    t is dropped and ``r_data[0]`` in cycle t + 6 is unspecified. Port B reading the block being
    written in the same cycle is undefined (a DP16KD collision). Addresses of ``depth`` and above
    read unspecified data and write nothing.

    On an ECP5 (or with ``primitive=True``) the block RAMs are :class:`hw.lib.bram.BramTdp`'s
    ``DP16KD`` instances and the duplicated address and select registers are ``FD1S3AX``
    instances, which Yosys cannot merge back into one register; elsewhere both are models.
    No resets: the datapath carries none, and the contents are whatever was written.

    Parameters
    ----------
    cfg : AccelConfig
        Geometry: ``mv_in`` (even) and ``mv_out`` give the block, ``mv_weight_blocks`` the depth.
    lanes_per_copy : int
        Lanes served by one group copy of each port's address registers (a divisor of ``lanes``).
    trunks : int or None
        Trunk copies of each port's address (and of the write's bank enables), each serving
        ``copies / trunks`` group copies (a divisor of :attr:`copies`); ``None`` (default): 4, or
        the largest divisor of :attr:`copies` that divides 4.
    primitive : bool or None
        ``True`` forces the ECP5 primitives, ``False`` the models; ``None`` (default) picks the
        primitives exactly when the platform is an ECP5.

    Members
    -------
    w : In(stream.Signature(StructLayout({"addr": range(depth), "data": ArrayLayout(signed(8), W)}),
        always_ready=True))
        Block writes; element ``n * mv_in + k`` of ``data`` is weight ``(n, k)``.
    r_addr : In(range(depth)).array(2)
        Block address of each port (core 0: port A, core 1: port B).
    r_data : Out(ArrayLayout(signed(8), W)).array(2)
        The block read ``latency`` cycles earlier, element ``n * mv_in + k`` as in ``w``.
    """

    latency = 6

    def __init__(self, cfg: AccelConfig, *, lanes_per_copy: int = 2, trunks: int | None = None,
                 primitive: bool | None = None):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"WeightStore cfg must be an AccelConfig, not {cfg!r}")
        if cfg.mv_in % 2:
            raise ValueError(f"WeightStore needs an even mv_in (two weights per word), not {cfg.mv_in!r}")
        lanes = cfg.mv_in * cfg.mv_out // 2
        if not isinstance(lanes_per_copy, int) or lanes_per_copy < 1 or lanes % lanes_per_copy:
            raise ValueError(f"WeightStore lanes_per_copy must divide the {lanes} lanes, "
                             f"not {lanes_per_copy!r}")
        copies = lanes // lanes_per_copy
        if trunks is None:
            trunks = math.gcd(4, copies)
        if not isinstance(trunks, int) or trunks < 1 or copies % trunks:
            raise ValueError(f"WeightStore trunks must divide the {copies} group copies, not {trunks!r}")
        if primitive not in (None, True, False):
            raise TypeError(f"WeightStore primitive must be None, True or False, not {primitive!r}")
        self._cfg, self._lanes_per_copy, self._trunks = cfg, lanes_per_copy, trunks
        self._primitive_choice = primitive
        depth = cfg.mv_weight_blocks
        self._block_layout = data.ArrayLayout(signed(8), cfg.mv_in * cfg.mv_out)
        super().__init__({
            "w": In(stream.Signature(data.StructLayout({"addr": range(depth), "data": self._block_layout}),
                                     always_ready=True)),
            "r_addr": In(range(depth)).array(2),
            "r_data": Out(self._block_layout).array(2),
        })

    @property
    def cfg(self) -> AccelConfig:
        return self._cfg

    @property
    def block_weights(self) -> int:
        """Weights per block, ``mv_in * mv_out``."""
        return self._cfg.mv_in * self._cfg.mv_out

    @property
    def lanes(self) -> int:
        """DP16KD columns read side by side (two weights per 18-bit word)."""
        return self.block_weights // 2

    @property
    def depth(self) -> int:
        """Blocks held: ``cfg.mv_weight_blocks``."""
        return self._cfg.mv_weight_blocks

    @property
    def banks(self) -> int:
        """DP16KD per lane (1,024 blocks each): :func:`bank_count`."""
        return bank_count(self._cfg)

    @property
    def copies(self) -> int:
        """Group copies of each port's address registers."""
        return self.lanes // self._lanes_per_copy

    @property
    def trunks(self) -> int:
        """Trunk copies of each port's address registers."""
        return self._trunks

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        prim = is_ecp5(platform) if self._primitive_choice is None else self._primitive_choice

        def reg(value, name, *, keep=False):
            """``value`` registered; with ``keep`` on the chip, a flop Yosys does not merge with its twins."""
            value = Value.cast(value)
            q = Signal(len(value), name=name, reset_less=True)
            if keep and prim:
                for i in range(len(value)):
                    m.submodules[f"{name}_{i}"] = Instance("FD1S3AX", p_GSR="DISABLED",
                                                           i_CK=ClockSignal("sync"), i_D=value[i], o_Q=q[i])
            else:
                m.d.sync += q.eq(value)
            return q

        row_bits = ceil_log2(min(self.depth, BANK_WORDS))
        addr_bits = len(self.r_addr[0])

        def onehot_bank(addr):
            if self.banks == 1:
                return C(1, 1)
            return Cat(addr[row_bits:] == b for b in range(self.banks))

        # Stage 1 (end of t): port A's address (the write's if there is one), port B's, the write's
        # bank enables, each in trunk copies; the write words once per lane.
        write = self.w.valid & (self.w.payload.addr < self.depth)    # beyond the depth: no write
        w_addr, w_data = self.w.payload.addr, self.w.payload.data
        a_addr = Signal(addr_bits)
        m.d.comb += a_addr.eq(Mux(write, w_addr, self.r_addr[0]))
        words = [Signal(WORD_BITS, name=f"w_word{lane}") for lane in range(self.lanes)]
        for n in range(cfg.mv_out):
            for k in range(cfg.mv_in):
                lane, half = weight_position(n, k, cfg.mv_in)
                m.d.comb += words[lane][half * HALF_BITS:(half + 1) * HALF_BITS].eq(w_data[n * cfg.mv_in + k])
        words_1 = [reg(word, f"w_word{lane}_s1") for lane, word in enumerate(words)]
        w_bank = onehot_bank(w_addr)
        trunk = []
        for t in range(self._trunks):
            trunk.append({
                "a_row": reg(a_addr[:row_bits], f"a_row_t{t}", keep=True),
                "b_row": reg(self.r_addr[1][:row_bits], f"b_row_t{t}", keep=True),
                "we": reg(Mux(write, w_bank, 0), f"we_t{t}", keep=True),
                "sel": [reg(onehot_bank(self.r_addr[p]), f"sel_p{p}_t{t}", keep=True) for p in range(2)],
            })

        # Stage 2 (end of t + 1): group copies next to their lanes' DP16KD, which capture the rows at
        # the end of t + 2 and hold the words in their output registers at the end of t + 3. The
        # one-hot banks ride along per lane (registered at the end of t + 2 and t + 3).
        blocks = [[None] * self.banks for _ in range(self.lanes)]
        sel = [[None] * self.lanes for _ in range(2)]       # one-hot bank of each lane's word, cycle t + 4
        per_trunk = self.copies // self._trunks
        for g in range(self.copies):
            src = trunk[g // per_trunk]
            a_row = reg(src["a_row"], f"a_row_c{g}", keep=True)
            b_row = reg(src["b_row"], f"b_row_c{g}", keep=True)
            we = reg(src["we"], f"we_c{g}", keep=True)
            sel2 = [reg(src["sel"][p], f"sel_p{p}_c{g}", keep=True) for p in range(2)]
            for lane in range(g * self._lanes_per_copy, (g + 1) * self._lanes_per_copy):
                word_2 = reg(words_1[lane], f"w_word{lane}_s2")
                for p in range(2):
                    sel3 = reg(sel2[p], f"sel3_p{p}_l{lane}", keep=True)
                    sel[p][lane] = reg(sel3, f"sel4_p{p}_l{lane}", keep=True)
                for b in range(self.banks):
                    bank_depth = min(BANK_WORDS, self.depth - b * BANK_WORDS)
                    ram = BramTdp(WORD_BITS, bank_depth, primitive=prim)
                    m.submodules[f"ram_l{lane}_b{b}"] = blocks[lane][b] = ram
                    m.d.comb += [
                        ram.a_addr.eq(a_row), ram.a_wdata.eq(word_2), ram.a_we.eq(we[b]),
                        ram.b_addr.eq(b_row),
                    ]

        # Stage 5 (end of t + 4): each pair of a lane's banks selected by the one-hot bank into a
        # partial word (16 bits: the two int8 weights; the sign-extension bits are not read).
        # Stage 6 (end of t + 5): the OR of the partial words into the lane's output register.
        for p in range(2):
            for lane in range(self.lanes):
                words_out = [ram.a_rdata if p == 0 else ram.b_rdata for ram in blocks[lane]]
                picked = [Cat(w[:8], w[HALF_BITS:HALF_BITS + 8]) & sel[p][lane][b].replicate(16)
                          for b, w in enumerate(words_out)]
                partial = [reg(picked[b] | (picked[b + 1] if b + 1 < len(picked) else 0),
                               f"pick_p{p}_l{lane}_b{b}") for b in range(0, len(picked), 2)]
                chosen = 0
                for part in partial:
                    chosen = chosen | part
                q = reg(chosen, f"r_p{p}_l{lane}")
                for n in range(cfg.mv_out):
                    for k in range(cfg.mv_in):
                        ln, half = weight_position(n, k, cfg.mv_in)
                        if ln == lane:
                            m.d.comb += self.r_data[p][n * cfg.mv_in + k].eq(q[half * 8:(half + 1) * 8])
        return m
