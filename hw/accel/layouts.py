"""Layouts the accelerator's blocks share with each other and with the host: the control word, one
input row of a group, the TAS unit's row, a core's job, an output row, the output's ``tuser``, the
scalar requantisation and SiLU-table words, the SiLU table's address rule, and counter widths."""

from amaranth import Cat, signed, unsigned
from amaranth.lib import data

from hw.lib.widths import index_bits
from sw.config import AccelConfig
from sw.spec import quant

__all__ = ["COUNTER_BITS", "FRAME_BITS", "THRESHOLD_BITS", "ctrl_layout", "row_in_layout",
           "decided_row_in_layout", "out_user_layout",
           "tas_row_layout", "job_layout", "job_meta_layout", "row_out_layout", "h_params_layout",
           "lut_load_layout",
           "lut_address"]

COUNTER_BITS = 40
FRAME_BITS = 8
#: Width of the threshold: int32 plus the out-of-range values 2**31 ("never") and -2**31 ("always").
THRESHOLD_BITS = quant.ACC_BITS + 2


def ctrl_layout():
    """The control word: scheduling mode (``static``; ``chunk_rr``: chunk round-robin instead of DRS
    when not static, last so that the earlier fields keep their bit positions) and the drift guard."""
    return data.StructLayout({"static": 1, "refresh_en": 1, "refresh_every": FRAME_BITS,
                              "max_chain_en": 1, "max_chain": 8, "chunk_rr": 1})


def row_in_layout(cfg: AccelConfig):
    """One row of a group: MLP input, ``q`` and ``k_prev`` (``d_model`` int8 each), the layer's
    integer threshold and where the row sits."""
    d = cfg.d_model
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), d),
        "q": data.ArrayLayout(signed(8), d),
        "k": data.ArrayLayout(signed(8), d),
        "threshold": signed(THRESHOLD_BITS),
        "layer": index_bits(cfg.layers),
        "frame": FRAME_BITS,
        "index": index_bits(cfg.tokens_per_frame),
        "row": index_bits(cfg.batch),
    })


def decided_row_in_layout(cfg: AccelConfig):
    """One row of a group with its decision already taken (the whole step's, from the attention's own
    scores: :class:`hw.step.tas_tap.TasTap`): MLP input, the row's TAS and replay bit, and where the
    row sits."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), cfg.d_model),
        "tas": signed(quant.ACC_BITS),
        "replay": 1,
        "layer": index_bits(cfg.layers),
        "index": index_bits(cfg.tokens_per_frame),
        "row": index_bits(cfg.batch),
    })


def out_user_layout(cfg: AccelConfig):
    """The output's ``tuser``: the replay decision, the row within the group and the row's integer
    TAS (:func:`sw.spec.quant.tas_int`, the score the decision was taken on)."""
    return data.StructLayout({"replay": 1, "row": index_bits(cfg.batch), "tas": signed(quant.ACC_BITS)})


def tas_row_layout(dim, layers, tokens_per_frame, batch, frame_bits=FRAME_BITS):
    """One row of one group as the TAS group takes it: ``q`` and ``k_prev`` (``dim = heads * head_dim``
    int8 each), the layer's integer threshold and where the row sits (layer, frame, in-frame index, row)."""
    return data.StructLayout({
        "q": data.ArrayLayout(signed(8), dim),
        "k": data.ArrayLayout(signed(8), dim),
        "threshold": signed(THRESHOLD_BITS),
        "layer": index_bits(layers),
        "frame": frame_bits,
        "index": index_bits(tokens_per_frame),
        "row": index_bits(batch),
    })


def job_layout(d_model, layers, chunks, tag_bits):
    """One unit of work of a core: the MLP input row ``x``, its layer, the hidden chunk and a tag."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), d_model),
        "layer": index_bits(layers),
        "chunk": index_bits(chunks),
        "tag": tag_bits,
    })


def job_meta_layout(layers, chunks, tag_bits):
    """A job as the dispatcher hands it out: :func:`job_layout` without ``x`` (a core reads the
    row's ``x`` from the row buffer at ``tag``)."""
    return data.StructLayout({
        "layer": index_bits(layers),
        "chunk": index_bits(chunks),
        "tag": tag_bits,
    })


def row_out_layout(d_model, tag_bits):
    """One finished MLP output row and the tag of the row it answers."""
    return data.StructLayout({"y": data.ArrayLayout(signed(8), d_model), "tag": tag_bits})


def lut_load_layout(layers=1):
    """One SiLU-table write: entry ``addr`` (code + 128) of layer ``layer``."""
    return data.StructLayout({"addr": 8, "layer": index_bits(layers), "value": signed(8)})


def h_params_layout():
    """One scalar requantisation (``mult``, ``shift``): ``act * up`` to ``h``, and a gate, up or down
    channel's entry in the per-channel tables."""
    return data.StructLayout({"mult": unsigned(quant.MULT_BITS), "shift": unsigned(quant.SHIFT_BITS)})


def lut_address(code):
    """Table address of an int8 code: ``code + 128``, i.e. the code with its sign bit flipped
    (:func:`sw.spec.quant.apply_lut`)."""
    return Cat(code[:7], ~code[7])
