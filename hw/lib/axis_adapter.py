"""Expose a component's streams as AXI4-Stream ports for bus models and boards."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxisAdapter", "axis_width"]


def axis_width(bits: int) -> int:
    """``tdata`` width: the payload padded up to whole bytes."""
    return max(8, -(-bits // 8) * 8)


def _axis_fields(payload):
    """``{"tdata": value, "tlast": value?, "tuser": value?}`` of a stream payload.

    A payload that is a struct of a ``data`` field and optionally ``last`` and ``user`` maps them to
    ``tdata``, ``tlast`` and ``tuser``; any other payload is all ``tdata``.
    """
    if isinstance(payload, data.View) and isinstance(payload.shape(), data.StructLayout):
        names = set(payload.shape().members)
        if "data" in names and names <= {"data", "last", "user"}:
            fields = {"tdata": Value.cast(payload.data)}
            for name in ("last", "user"):
                if name in names:
                    fields[f"t{name}"] = Value.cast(getattr(payload, name))
            return fields
    return {"tdata": Value.cast(payload)}


class AxisAdapter(wiring.Component):
    """Wraps a component whose ports are ``amaranth.lib.stream`` streams and renames each stream
    ``n`` to AXI4-Stream signals: ``s_axis_<n>_tdata/tvalid/tready`` for inputs and
    ``m_axis_<n>_tdata/tvalid/tready`` for outputs. ``tdata`` is the payload's bits (element 0 of an
    array in the least significant bits) padded with zeros to whole bytes, so bus models such as
    cocotbext-axi's ``AxiStreamSource``/``AxiStreamSink`` see one byte per lane. A payload struct
    with fields ``data``, ``last`` and ``user`` becomes ``tdata``, ``tlast`` and ``tuser``; without
    ``last`` every beat is one item. Members that are not streams (status counters) pass through
    under their own names (``name_<i>`` for arrays); a member that is a bus of plain signals (such as
    :class:`hw.lib.axi.AxiReadSignature`) becomes ``<name>_<signal>`` for each of its signals.

    Parameters
    ----------
    dut : wiring.Component
        The wrapped component.
    """

    def __init__(self, dut):
        self._dut = dut
        members = {}
        self._streams = []
        self._ports = []
        self._buses = []
        for name, member in dut.signature.members.items():
            intf = getattr(dut, name)
            if member.is_signature and not isinstance(member.signature, stream.Signature):
                # A bus of plain signals (an AXI4 manager's channels): each as <name>_<signal>.
                for sub, sm in member.signature.members.items():
                    flow = sm.flow if member.flow == Out else sm.flow.flip()
                    members[f"{name}_{sub}"] = (In if flow == In else Out)(sm.shape)
                    self._buses.append((f"{name}_{sub}", flow, getattr(intf, sub)))
                continue
            if not member.is_signature:
                items = [(name, intf)] if not member.dimensions else \
                    [(f"{name}_{i}", intf[i]) for i in range(member.dimensions[0])]
                for pname, sig in items:
                    members[pname] = (In if member.flow == In else Out)(len(sig))
                    self._ports.append((pname, member.flow, name, items.index((pname, sig))
                                        if member.dimensions else None))
                continue
            fields = _axis_fields(intf.payload)
            pre = f"s_axis_{name}" if member.flow == In else f"m_axis_{name}"
            d_in = In if member.flow == In else Out
            d_out = Out if member.flow == In else In
            members[f"{pre}_tdata"] = d_in(axis_width(len(fields["tdata"])))
            for f in ("tlast", "tuser"):
                if f in fields:
                    members[f"{pre}_{f}"] = d_in(len(fields[f]))
            members[f"{pre}_tvalid"] = d_in(1)
            members[f"{pre}_tready"] = d_out(1)
            self._streams.append((name, member.flow, pre))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        for name, flow, pre in self._streams:
            intf = getattr(dut, name)
            fields = _axis_fields(intf.payload)
            tvalid, tready = getattr(self, f"{pre}_tvalid"), getattr(self, f"{pre}_tready")
            if flow == In:
                for f, value in fields.items():
                    m.d.comb += value.eq(getattr(self, f"{pre}_{f}")[:len(value)])
                m.d.comb += [intf.valid.eq(tvalid), tready.eq(intf.ready)]
            else:
                for f, value in fields.items():
                    m.d.comb += getattr(self, f"{pre}_{f}").eq(value)
                m.d.comb += tvalid.eq(intf.valid)
                if not isinstance(intf.ready, Const):
                    m.d.comb += intf.ready.eq(tready)
        for pname, flow, sig in self._buses:
            if flow == In:
                m.d.comb += sig.eq(getattr(self, pname))
            else:
                m.d.comb += getattr(self, pname).eq(sig)
        for pname, flow, name, idx in self._ports:
            sig = getattr(dut, name) if idx is None else getattr(dut, name)[idx]
            if flow == In:
                m.d.comb += sig.eq(getattr(self, pname))
            else:
                m.d.comb += getattr(self, pname).eq(sig)
        return m
