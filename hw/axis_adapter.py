"""Expose a component's streams as AXI4-Stream ports for bus models and boards."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxisAdapter", "axis_width"]


def axis_width(bits: int) -> int:
    """``tdata`` width: the payload padded up to whole bytes."""
    return max(8, -(-bits // 8) * 8)


class AxisAdapter(wiring.Component):
    """Wraps a component whose ports are ``amaranth.lib.stream`` streams and renames each stream
    ``n`` to AXI4-Stream signals: ``s_axis_<n>_tdata/tvalid/tready`` for inputs and
    ``m_axis_<n>_tdata/tvalid/tready`` for outputs. ``tdata`` is the payload's bits (element 0 of an
    array in the least significant bits) padded with zeros to whole bytes, so bus models such as
    cocotbext-axi's ``AxiStreamSource``/``AxiStreamSink`` see one byte per lane. There is no
    ``tlast``: every beat is one item.

    Parameters
    ----------
    dut : wiring.Component
        The wrapped component; every member must be a stream.
    """

    def __init__(self, dut):
        self._dut = dut
        members = {}
        self._streams = []
        for name, member in dut.signature.members.items():
            if not member.is_signature:
                raise TypeError(f"AxisAdapter: member {name!r} of {dut!r} is not a stream")
            intf = getattr(dut, name)
            width = len(Value.cast(intf.payload))
            w = axis_width(width)
            if member.flow == In:
                pre = f"s_axis_{name}"
                members[f"{pre}_tdata"] = In(w)
                members[f"{pre}_tvalid"] = In(1)
                members[f"{pre}_tready"] = Out(1)
            else:
                pre = f"m_axis_{name}"
                members[f"{pre}_tdata"] = Out(w)
                members[f"{pre}_tvalid"] = Out(1)
                members[f"{pre}_tready"] = In(1)
            self._streams.append((name, member.flow, pre, width))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        for name, flow, pre, width in self._streams:
            intf = getattr(dut, name)
            tdata, tvalid, tready = (getattr(self, f"{pre}_{s}") for s in ("tdata", "tvalid", "tready"))
            if flow == In:
                m.d.comb += [
                    Value.cast(intf.payload).eq(tdata[:width]),
                    intf.valid.eq(tvalid),
                    tready.eq(intf.ready),
                ]
            else:
                m.d.comb += [tdata.eq(Value.cast(intf.payload)), tvalid.eq(intf.valid)]
                if not isinstance(intf.ready, Const):
                    m.d.comb += intf.ready.eq(tready)
        return m
