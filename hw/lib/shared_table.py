"""A configuration table in block RAM read by two consumers, one through each port of the blocks."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.bram import CONFIGS as BRAM_CONFIGS
from hw.lib.bram import BramTdp, widest_data_width
from hw.lib.widths import index_bits

__all__ = ["SharedTable", "table_write_layout"]


def table_blocks(width: int, depth: int) -> int:
    """DP16KD blocks of a ``width``-bit, ``depth``-word :class:`SharedTable`, side by side."""
    return -(-width // widest_data_width(depth))


def table_write_layout(width: int, depth: int):
    """One write of a :class:`SharedTable`: ``addr`` and the word ``data``."""
    return data.StructLayout({"addr": index_bits(depth), "data": width})


class SharedTable(wiring.Component):
    """A ``width``-bit, ``depth``-word table written by the configuration and read by two
    consumers, on :class:`hw.lib.bram.BramTdp` blocks side by side (``ceil(width / DATA_WIDTH)``
    DP16KD, the narrowest ``DATA_WIDTH`` whose depth holds the table).

    Reader 0 reads through port A, reader 1 through port B, both with the blocks' output
    register (``latency = 2``, the latency of :class:`hw.lib.bram.Bram`). A write takes port A for its
    cycle: writes belong to the configuration, which comes before any row is computed, so reader
    0 never reads while the table is written (if it did, its read in that cycle returns an
    earlier word; nothing else changes). One table for two cores instead of one each halves the
    blocks: this is what keeps the v2 accelerator inside the ECP5-85F's 208 DP16KD.

    Parameters
    ----------
    width : int
        Word width in bits (any; wider than one block's ``DATA_WIDTH`` takes several blocks).
    depth : int
        Number of words; must fit one DP16KD deep at some ``DATA_WIDTH``.

    Members
    -------
    w : In(stream.Signature(table_write_layout(width, depth), always_ready=True))
        Table writes (the configuration).
    r_addr : In(index_bits(depth)).array(2)
    r_data : Out(width).array(2)
        Reader ``k``: the word at ``r_addr[k]`` of cycle t is on ``r_data[k]`` in cycle t + 2.
    """

    latency = BramTdp.latency

    def __init__(self, width: int, depth: int):
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"SharedTable width must be a positive integer, not {width!r}")
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"SharedTable depth must be an integer of at least 2, not {depth!r}")
        dw = widest_data_width(depth)
        if dw is None:
            raise ValueError(f"SharedTable: {depth} words do not fit one DP16KD deep "
                             f"(at most {BRAM_CONFIGS[0][1]})")
        self._width, self._depth, self._dw = width, depth, dw
        abits = index_bits(depth)
        super().__init__({
            "w": In(stream.Signature(table_write_layout(width, depth), always_ready=True)),
            "r_addr": In(abits).array(2),
            "r_data": Out(width).array(2),
        })

    @property
    def blocks(self) -> int:
        """DP16KD blocks the table takes: :func:`table_blocks`."""
        return table_blocks(self._width, self._depth)

    def elaborate(self, platform):
        m = Module()
        a_addr = Signal.like(self.r_addr[0])
        m.d.comb += a_addr.eq(Mux(self.w.valid, self.w.p.addr, self.r_addr[0]))
        for k, lo in enumerate(range(0, self._width, self._dw)):
            hi = min(self._width, lo + self._dw)
            ram = BramTdp(hi - lo, self._depth)
            m.submodules[f"ram_{k}"] = ram
            m.d.comb += [
                ram.a_addr.eq(a_addr), ram.a_we.eq(self.w.valid), ram.a_wdata.eq(self.w.p.data[lo:hi]),
                ram.b_addr.eq(self.r_addr[1]),
                self.r_data[0][lo:hi].eq(ram.a_rdata), self.r_data[1][lo:hi].eq(ram.b_rdata),
            ]
        return m
