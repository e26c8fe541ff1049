"""Layouts shared by both datapaths (:mod:`hw.accel.accelerator`, :mod:`hw.accel.accelerator_v2`)
and the host: the control word, one input row of a group, the output's ``tuser``, and counter widths."""

from amaranth import signed
from amaranth.lib import data

from hw.accel.tas_unit import THRESHOLD_BITS
from hw.lib.widths import index_bits
from sw.config import AccelConfig

__all__ = ["COUNTER_BITS", "FRAME_BITS", "ctrl_layout", "row_in_layout", "out_user_layout"]

COUNTER_BITS = 40
FRAME_BITS = 8


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


def out_user_layout(cfg: AccelConfig):
    return data.StructLayout({"replay": 1, "row": index_bits(cfg.batch)})
