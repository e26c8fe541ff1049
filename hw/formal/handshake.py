"""The stream handshake rule on every stream of a block."""

from amaranth import *

from hw.formal.harness import PropertyWrapper, in_ports, stream_hold

__all__ = ["StreamHandshake"]


def _streams(dut, names):
    """``[(label, interface)]`` for the named members; an array of streams gives one per element."""
    out = []
    for name in names:
        port = getattr(dut, name)
        if isinstance(port, (list, tuple)):
            out += [(f"{name}_{k}", p) for k, p in enumerate(port)]
        else:
            out.append((name, port))
    return out


class StreamHandshake(PropertyWrapper):
    """Every output stream of ``dut`` keeps ``valid`` high with a stable payload until ``ready``,
    provided every input stream does the same.

    Every input of ``dut`` is free; ``constants`` (configuration inputs that change only while
    idle) are held at one arbitrary value; ``assume`` adds the block's own input contract.

    Parameters
    ----------
    dut : wiring.Component
        Block under test.
    inputs, outputs : list of str
        Names of its input and output streams (arrays of streams allowed).
    constants : list of str
        Names of configuration inputs.
    assume : callable, optional
        ``assume(m, dut)`` adds further input assumptions.
    """

    def __init__(self, dut, *, inputs=(), outputs=(), constants=(), assume=None):
        super().__init__()
        self.dut = dut
        self.free(*in_ports(dut))
        self._inputs = _streams(dut, inputs)
        self._outputs = _streams(dut, outputs)
        self._constants = list(constants)
        self._assume = assume
        if not self._outputs:
            raise ValueError("StreamHandshake needs at least one output stream")

    def elaborate(self, platform):
        m = self.module()
        m.submodules.dut = self.dut
        for name in self._constants:
            self.constant(m, getattr(self.dut, name), name=name)
        for label, port in self._inputs:
            stream_hold(m, port, name=label, assume=True)
        for label, port in self._outputs:
            waiting = stream_hold(m, port, name=label)
            self.cover(m, waiting & port.valid & port.ready, f"{label}: a beat waits, then leaves")
        if self._assume is not None:
            self._assume(m, self.dut)
        return m
