"""AXI4 interface signatures (the manager's view), named as the AXI4 specification names the signals."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["AxiReadSignature", "AxiWriteSignature", "BURST_INCR", "BOUNDARY_BYTES", "burst_words"]

#: ``ARBURST`` of an incrementing burst.
BURST_INCR = 1
#: A burst must not cross a 4 KB address boundary (AXI4).
BOUNDARY_BYTES = 4096


class AxiReadSignature(wiring.Signature):
    """The read channels of an AXI4 manager: ``ar*`` (address) out, ``r*`` (data) in.

    :class:`hw.lib.axis_adapter.AxisAdapter` exposes a member ``m_axi`` of this signature as
    ``m_axi_araddr``, ``m_axi_rdata`` ..., the names cocotbext-axi's ``AxiReadBus.from_prefix`` finds.

    Parameters
    ----------
    addr_width, data_width, id_width : int
    """

    def __init__(self, addr_width=32, data_width=64, id_width=1):
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__({
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1), "rvalid": In(1),
            "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AxiReadSignature) and
                (self.addr_width, self.data_width, self.id_width) ==
                (other.addr_width, other.data_width, other.id_width))

    def __hash__(self):
        return hash((AxiReadSignature, self.addr_width, self.data_width, self.id_width))


class AxiWriteSignature(wiring.Signature):
    """The write channels of an AXI4 manager: ``aw*`` (address) and ``w*`` (data) out, ``b*``
    (response) in; exposed by :class:`hw.lib.axis_adapter.AxisAdapter` as ``m_axi_awaddr`` ...

    Parameters
    ----------
    addr_width, data_width, id_width : int
    """

    def __init__(self, addr_width=32, data_width=64, id_width=1):
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__({
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1), "wvalid": Out(1),
            "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AxiWriteSignature) and
                (self.addr_width, self.data_width, self.id_width) ==
                (other.addr_width, other.data_width, other.id_width))

    def __hash__(self):
        return hash((AxiWriteSignature, self.addr_width, self.data_width, self.id_width))


def burst_words(m, addr, left, *, max_burst, size):
    """The next burst of a region, in words: ``min(max_burst, left, words to the next 4 KB
    boundary)`` for the byte address ``addr`` (aligned to ``2**size`` bytes) with ``left`` words to
    go; one rule for the read and the write managers. Returns a combinational signal."""
    to_boundary_max = BOUNDARY_BYTES >> size
    to_boundary = Signal(range(to_boundary_max + 1))
    m.d.comb += to_boundary.eq(to_boundary_max - addr[size:ceil_log2(BOUNDARY_BYTES)])
    n = Signal(range(max_burst + 1))
    m.d.comb += n.eq(max_burst)
    with m.If((left < max_burst) & (left <= to_boundary)):
        m.d.comb += n.eq(left)
    with m.Elif(to_boundary < max_burst):
        m.d.comb += n.eq(to_boundary)
    return n
