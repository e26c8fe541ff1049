"""AXI4 interface signatures (the manager's view), named as the AXI4 specification names the signals."""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiReadSignature", "BURST_INCR", "BOUNDARY_BYTES"]

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
