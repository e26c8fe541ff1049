"""The decode step's weights and norm constants, streamed from memory over AXI4, step by step."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.lib.axi import AxiReadSignature
from hw.lib.axi_reader import AxiReader
from hw.step.channel_join import channel_layout
from hw.step.row_runs import weight_layout
from sw.spec import quant

__all__ = ["WeightStream", "weight_command_layout", "channel_words", "block_words", "layer_words",
           "head_words", "pack_channels", "pack_blocks"]

#: Bits of a channel's constants in memory (``mult`` then ``shift``, as :func:`channel_layout`).
CHANNEL_SLOT = 32
_LAYER, _NF, _HEAD = 0, 1, 2
_N1, _W, _WO, _N2, _SF, _HW = range(6)


def weight_command_layout():
    """A step: whether it samples (its final norm and LM head read after its layers)."""
    return data.StructLayout({"sample": 1})


def _const_words(n_out, data_width):
    return -(-n_out * (quant.MULT_BITS + quant.SHIFT_BITS) // data_width)


def _beat_words(n_in, n_out, data_width):
    return -(-n_in * n_out * 8 // data_width)


def channel_words(d_model, data_width=64):
    """Words of a norm's ``d_model`` channel constants: ``data_width / 32`` channels a word, each in
    32 bits (``mult``, then ``shift``, the rest zero)."""
    return d_model // (data_width // CHANNEL_SLOT)


def block_words(d_in, n_in, n_out, data_width=64):
    """Words of a weight block (``n_out`` outputs of ``x @ w``): its outputs' constants (``mult``
    then ``shift``, as :func:`hw.step.row_runs.weight_layout` has them, in whole words), then its
    ``d_in / n_in`` beats of ``n_in * n_out`` int8 weights (each in whole words)."""
    return _const_words(n_out, data_width) + d_in // n_in * _beat_words(n_in, n_out, data_width)


def layer_words(d_model, n_in, n_out, data_width=64):
    """Words of a layer's image: the input norm's channels, the q, k and v blocks, the o blocks, the
    MLP's norm's channels."""
    return (2 * channel_words(d_model, data_width)
            + 4 * d_model // n_out * block_words(d_model, n_in, n_out, data_width))


def head_words(d_model, codebook, n_in, n_out, data_width=64):
    """Words of the LM head's image (the image tokens' blocks); the final norm's channels come before
    it, :func:`channel_words` more."""
    return codebook // n_out * block_words(d_model, n_in, n_out, data_width)


def pack_channels(mult, shift, data_width=64) -> bytes:
    """A norm's constants as :class:`WeightStream` reads them."""
    slots = [int(m) | int(s) << quant.MULT_BITS for m, s in zip(mult, shift, strict=True)]
    return b"".join(v.to_bytes(CHANNEL_SLOT // 8, "little") for v in slots)


def pack_blocks(w, mult, shift, n_in, n_out, data_width=64) -> bytes:
    """``x @ w`` (``w`` [d_in, d_out] int8, its ``d_out`` constants) as :class:`WeightStream` reads
    it: per block of ``n_out`` outputs, the constants, then the beats (``w[n * n_in + k]`` for input
    ``k`` and output ``n``, as :func:`hw.step.row_runs.weight_layout`)."""
    import numpy as np

    nb = data_width // 8
    cw, bw = _const_words(n_out, data_width) * nb, _beat_words(n_in, n_out, data_width) * nb
    out = []
    for j in range(w.shape[1] // n_out):
        c = 0
        for n in range(n_out):
            c |= int(mult[j * n_out + n]) << (quant.MULT_BITS * n)
            c |= int(shift[j * n_out + n]) << (quant.MULT_BITS * n_out + quant.SHIFT_BITS * n)
        out.append(c.to_bytes(cw, "little"))
        cols = np.asarray(w)[:, j * n_out:(j + 1) * n_out].astype(np.int8)
        for k in range(w.shape[0] // n_in):
            out.append(np.ascontiguousarray(cols[k * n_in:(k + 1) * n_in].T).tobytes().ljust(bw, b"\0"))
    return b"".join(out)


class WeightStream(wiring.Component):
    """The weights and constants a decode step's layers and token head take, read from memory over
    AXI4 (one :class:`hw.lib.axi_reader.AxiReader`, its prefetch buffer running ahead of the
    blocks) in the order the step takes them, and split onto their streams.

    Per step taken on ``i``: for each layer, its image (:func:`layer_words` words at ``base`` +
    the layer's index times its bytes): the input norm's constants out on ``n1``, the q, k and v
    projections' blocks on ``w``, the o projection's on ``wo``, the MLP's norm's on ``n2``; then,
    for a step that samples, the final norm's constants (after the layers' images) on ``nf`` and
    the LM head's blocks (after those) once per prompt on ``hw``. Each block's constants go with
    each of its beats.

    Parameters
    ----------
    d_model, layers, prompts, codebook : int
        The model's.
    n_in, n_out : int
        The MAC array's block (:func:`hw.step.row_runs.weight_layout`).
    addr_width, data_width, max_burst, depth : int
        The AXI4 bus and the prefetch buffer (words).

    Members
    -------
    i : In(stream.Signature(weight_command_layout()))
    base : In(addr_width)
        The image's byte address (aligned to the data width), static while steps run.
    n1, n2, nf : Out(stream.Signature(channel_layout()))
    w, wo, hw : Out(stream.Signature(weight_layout(n_in, n_out)))
    rd : Out(AxiReadSignature(addr_width, data_width))
    error : Out(1)
        Set (and held) on an answer other than OKAY.
    """

    def __init__(self, d_model, layers, prompts, codebook, n_in, n_out, *, addr_width=32, data_width=64,
                 max_burst=16, depth=64):
        for name, v in (("d_model", d_model), ("layers", layers), ("prompts", prompts),
                        ("codebook", codebook),
                        ("n_in", n_in), ("n_out", n_out), ("data_width", data_width)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"WeightStream {name} must be a positive integer, not {v!r}")
        if data_width < CHANNEL_SLOT or d_model % (data_width // CHANNEL_SLOT):
            raise ValueError(f"WeightStream data_width ({data_width}) must be at least {CHANNEL_SLOT} and "
                             f"d_model ({d_model}) a multiple of its {CHANNEL_SLOT}-bit channels a word")
        for name, v, by in (("d_model", d_model, n_in), ("d_model", d_model, n_out),
                            ("codebook", codebook, n_out)):
            if v % by:
                raise ValueError(f"WeightStream {name} ({v}) must be a multiple of the block's {by}")
        self._d, self._l, self._pr, self._c = d_model, layers, prompts, codebook
        self._ni, self._no, self._aw, self._dw = n_in, n_out, addr_width, data_width
        self._lw = layer_words(d_model, n_in, n_out, data_width)
        self._hwords = head_words(d_model, codebook, n_in, n_out, data_width)
        count_bits = ceil_log2(max(self._lw, self._hwords) + 1) + 1
        self._reader = AxiReader(addr_width, data_width, max_burst=max_burst, depth=depth,
                                 count_bits=count_bits)
        super().__init__({
            "i": In(stream.Signature(weight_command_layout())),
            "base": In(addr_width),
            "n1": Out(stream.Signature(channel_layout())),
            "n2": Out(stream.Signature(channel_layout())),
            "nf": Out(stream.Signature(channel_layout())),
            "w": Out(stream.Signature(weight_layout(n_in, n_out))),
            "wo": Out(stream.Signature(weight_layout(n_in, n_out))),
            "hw": Out(stream.Signature(weight_layout(n_in, n_out))),
            "rd": Out(AxiReadSignature(addr_width, data_width)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, L, PR, C, NI, NO, DW = self._d, self._l, self._pr, self._c, self._ni, self._no, self._dw
        nb = DW // 8
        CH = channel_words(D, DW)
        CPW = DW // CHANNEL_SLOT
        CW, BW = _const_words(NO, DW), _beat_words(NI, NO, DW)
        LAYER_BYTES = self._lw * nb
        m.submodules.reader = rdr = self._reader
        wiring.connect(m, rdr.m_axi, wiring.flipped(self.rd))
        m.d.comb += self.error.eq(rdr.error)

        # ---- the regions: each layer's image, then the final norm and the head once per prompt ------
        m.submodules.kinds = kinds = fifo.SyncFIFOBuffered(width=2, depth=4)
        sample = Signal()
        li = Signal(range(L))
        pr = Signal(range(PR))
        fire = Signal()
        m.d.comb += fire.eq(rdr.i.valid & rdr.i.ready)

        def issue(addr, words, kind):
            m.d.comb += [rdr.i.valid.eq(kinds.w_rdy), rdr.i.p.addr.eq(addr), rdr.i.p.words.eq(words),
                         kinds.w_data.eq(kind), kinds.w_en.eq(fire)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += [sample.eq(self.i.p.sample), li.eq(0), pr.eq(0)]
                    m.next = "LAYER"
            with m.State("LAYER"):
                issue(self.base + li * LAYER_BYTES, self._lw, _LAYER)
                with m.If(fire):
                    m.d.sync += li.eq(li + 1)
                    with m.If((li == L - 1) & sample):
                        m.next = "NF"
                    with m.Elif(li == L - 1):
                        m.next = "IDLE"
            with m.State("NF"):
                issue(self.base + L * LAYER_BYTES, CH, _NF)
                with m.If(fire):
                    m.next = "HEAD"
            with m.State("HEAD"):
                issue(self.base + L * LAYER_BYTES + CH * nb, self._hwords, _HEAD)
                with m.If(fire):
                    m.d.sync += pr.eq(pr + 1)
                    with m.If(pr == PR - 1):
                        m.next = "IDLE"

        # ---- the words read, split onto the streams ------------------------------------------------
        word = rdr.o.p.data
        seg = Signal(range(6))                    # the segment of the region the next word is in
        seg_go = Signal()                         # seg is set for the region at the head of kinds
        n_ch = Signal(range(D))                   # channels of the segment out
        sub = Signal(range(max(2, CPW)))          # the next channel's slot in the word
        n_blk = Signal(range(max(2, C // NO, 4 * D // NO)))
        n_beat = Signal(range(max(2, D // NI)))
        in_const = Signal(init=1)                 # the next words are a block's constants
        got = Signal(range(max(2, CW, BW) + 1))
        const = Signal(CW * DW)
        beat = Signal(BW * DW)
        full = Signal()                           # beat (with const) waits on its stream
        chans = {_N1: self.n1, _N2: self.n2, _SF: self.nf}
        blocks = {_W: (self.w, 3 * D // NO), _WO: (self.wo, D // NO), _HW: (self.hw, C // NO)}

        with m.If(~seg_go & kinds.r_rdy):
            m.d.sync += [seg_go.eq(1), seg.eq(Mux(kinds.r_data == _LAYER, _N1,
                                                  Mux(kinds.r_data == _NF, _SF, _HW)))]

        def end_segment(nxt):
            """After the segment: the next of the region, or the region's end (``None``)."""
            if nxt is None:
                m.d.sync += seg_go.eq(0)
                m.d.comb += kinds.r_en.eq(1)
            else:
                m.d.sync += seg.eq(nxt)

        after = {_N1: _W, _W: _WO, _WO: _N2, _N2: None, _SF: None, _HW: None}

        # Channels: one a cycle from the word's slots.
        for k, s in chans.items():
            m.d.comb += s.payload.eq(word.word_select(sub, CHANNEL_SLOT)[:channel_layout().size])
            with m.If(seg_go & (seg == k)):
                m.d.comb += s.valid.eq(rdr.o.valid)
                with m.If(s.valid & s.ready):
                    m.d.sync += [sub.eq(Mux(sub == CPW - 1, 0, sub + 1)),
                                 n_ch.eq(Mux(n_ch == D - 1, 0, n_ch + 1))]
                    m.d.comb += rdr.o.ready.eq(sub == CPW - 1)
                    with m.If(n_ch == D - 1):
                        end_segment(after[k])

        # Blocks: the constants' words, then each beat's words; a beat leaves with the constants (no
        # word is taken while a beat waits, so neither changes under it).
        w_bits = NI * NO * 8
        take = Signal()                           # a word of a block segment taken
        for k, (s, n) in blocks.items():
            m.d.comb += s.payload.eq(Cat(beat[:w_bits], const[:weight_layout(NI, NO).size - w_bits]))
            with m.If(seg_go & (seg == k)):
                m.d.comb += [s.valid.eq(full), rdr.o.ready.eq(~full), take.eq(rdr.o.valid & ~full)]
                with m.If(s.valid & s.ready):
                    m.d.sync += [full.eq(0), n_beat.eq(Mux(n_beat == D // NI - 1, 0, n_beat + 1))]
                    with m.If(n_beat == D // NI - 1):
                        m.d.sync += [n_blk.eq(Mux(n_blk == n - 1, 0, n_blk + 1)), in_const.eq(1)]
                        with m.If(n_blk == n - 1):
                            end_segment(after[k])
        with m.If(take):
            m.d.sync += got.eq(got + 1)
            with m.If(in_const):
                m.d.sync += const.eq(Cat(const[DW:], word) if CW > 1 else word)
                with m.If(got == CW - 1):
                    m.d.sync += [in_const.eq(0), got.eq(0)]
            with m.Else():
                m.d.sync += beat.eq(Cat(beat[DW:], word) if BW > 1 else word)
                with m.If(got == BW - 1):
                    m.d.sync += [full.eq(1), got.eq(0)]
        return m
