"""Building blocks of the property wrappers: the clock, free inputs, previous-cycle registers,
the stream handshake rule, cover statements and access to a block's internal registers.

Amaranth 0.5 has ``Assert``, ``Assume`` and ``Cover`` but no ``Past``, ``AnyConst`` or ``AnySeq``.
Here a free input is a port of the wrapper (the solver picks its value in every cycle), a constant
is a free input assumed equal to its previous value, and ``past`` is a register written every
cycle. The wrapper's ``sync`` domain has no reset: the registers start from their ``init`` values.
"""

from amaranth import *
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring

__all__ = ["PropertyWrapper", "past", "stream_hold", "in_ports", "Internals"]


def in_ports(component):
    """The signals of every ``In`` member of ``component`` (its free inputs when it is the DUT)."""
    ports = []
    for _, member, value in component.signature.flatten(component):
        if member.flow == wiring.In:
            v = Value.cast(value)
            if isinstance(v, Signal):
                ports.append(v)
    return ports


class Internals:
    """A block elaborated by the wrapper, with its internal registers found by name.

    The unbounded proofs need invariants over a block's internal state (k-induction cannot close
    otherwise). The invariants are asserted, never assumed, so a wrong one fails the check
    instead of hiding a bug; a renamed register gives one clear error.

    Parameters
    ----------
    dut : Elaboratable
        The block; add :attr:`fragment` to the wrapper's module as its submodule.
    platform : object
        Passed to ``elaborate``.
    """

    def __init__(self, dut, platform=None):
        from amaranth.hdl import Fragment

        self.dut = dut
        self.fragment = Fragment.get(dut, platform)
        self._signals = {}
        for stmts in self.fragment.statements.values():
            for stmt in stmts:
                for sig in stmt._lhs_signals():
                    self._signals.setdefault(sig.name, sig)

    def __getitem__(self, name):
        try:
            return self._signals[name]
        except KeyError:
            raise KeyError(f"{type(self.dut).__name__} has no internal register {name!r}, which the "
                           f"formal invariants in hw/formal/ refer to; update them to the RTL") from None


def past(m, value, *, name, init=0):
    """A register holding ``value`` as it was in the previous cycle (``init`` in the first)."""
    value = Value.cast(value)
    reg = Signal(value.shape(), name=name, init=init)
    m.d.sync += reg.eq(value)
    return reg


def stream_hold(m, port, *, name, assume=False):
    """The stream rule: once ``valid`` is raised it stays high, with the same payload, until the
    cycle in which ``ready`` is high too.

    Checked with ``Assert`` for an output of the design, or imposed with ``Assume`` on an input
    (``assume=True``). An always-ready stream has nothing to hold.

    Parameters
    ----------
    m : Module
    port : stream interface
    name : str
        Prefix of the two registers this adds.
    assume : bool
        Constrain instead of check.

    Returns
    -------
    Signal or None
        High in the cycle after one in which a beat waited (``None`` for an always-ready stream).
    """
    if isinstance(port.ready, Const):
        return None
    payload = Value.cast(port.payload)
    waiting = past(m, port.valid & ~port.ready, name=f"{name}_waiting")
    before = past(m, payload, name=f"{name}_payload_before")
    rule = port.valid & (payload == before)
    with m.If(waiting):
        if assume:
            m.d.comb += Assume(rule, f"{name}: input holds valid and payload until ready", src_loc_at=1)
        else:
            m.d.comb += Assert(rule, f"{name}: valid and payload held until ready", src_loc_at=1)
    return waiting


class PropertyWrapper(Elaboratable):
    """Base of the property wrappers: a reset-less ``sync`` domain driven by the port ``clk``,
    and a list of free inputs.

    Subclasses call :meth:`free` for every signal the solver may choose (the DUT's inputs, symbolic
    constants) and build their module with :meth:`module`.

    Members
    -------
    clk : Signal
        The clock; one SymbiYosys step is one cycle.
    """

    def __init__(self):
        self.clk = Signal()
        self._free = []
        self._first = Signal(init=1, name="first_cycle")

    def free(self, *values):
        """Declare free inputs; returns the first one."""
        for v in values:
            v = Value.cast(v)
            if not isinstance(v, Signal):
                raise TypeError(f"a free input must be a signal, not {v!r}")
            if not any(v is f for f in self._free):
                self._free.append(v)
        return values[0] if values else None

    def constant(self, m, value, *, name):
        """Constrain a free input to keep the value it has in the first cycle (an ``AnyConst``)."""
        self.free(value)
        before = past(m, value, name=f"{name}_before")
        with m.If(~self._first):
            m.d.comb += Assume(Value.cast(value) == before, f"{name} is constant", src_loc_at=1)

    def cover(self, m, condition, message):
        """A ``Cover``: SymbiYosys' cover mode must reach ``condition`` (shows that the
        assumptions leave the interesting behaviour possible, so a proof is not vacuous)."""
        m.d.comb += Cover(condition, message, src_loc_at=1)

    def module(self):
        m = Module()
        m.domains.sync = cd = ClockDomain(reset_less=True)
        m.d.comb += cd.clk.eq(self.clk)
        m.d.sync += self._first.eq(0)
        return m

    @property
    def first(self):
        """High in the first cycle only."""
        return self._first

    def ports(self):
        return [self.clk, *self._free]
