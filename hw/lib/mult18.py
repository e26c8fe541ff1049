"""Registered 18 x 18 signed multiplier: an ECP5 ``MULT18X18D`` on the chip, a model elsewhere."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Mult18", "Mult18Pair", "is_ecp5"]

#: Operand width of the ECP5 DSP multiplier.
WIDTH = 18


def is_ecp5(platform) -> bool:
    """Whether ``platform`` builds for a Lattice ECP5 (where :class:`Mult18` is the primitive)."""
    return platform is not None and getattr(platform, "family", None) == "ecp5"


class Mult18(wiring.Component):
    """``p = a * b`` with registered inputs and a registered product: ``latency = 2`` cycles.

    On an ECP5 platform this is one hand-instantiated ``MULT18X18D`` with ``REG_INPUTA_CLK``,
    ``REG_INPUTB_CLK`` and ``REG_OUTPUT_CLK`` on ``CLK0``: the three pipeline registers sit inside
    the DSP block. Yosys never puts registers into the block by itself, and with fabric registers
    around an inferred multiplier the routing to and from the block limits the clock (see
    ``docs/timing.md``). Everywhere else (simulation, Verilog for cocotb) it is
    the behavioural model below, cycle for cycle the same: ``tests/hw/lib/test_mult18.py`` and
    ``tb/mult18`` check the two against each other.

    The registers have no reset and no enable, like the pipeline they replace: ``p`` is the
    product of the operands presented two cycles earlier.

    Parameters
    ----------
    a_width, b_width : int
        Signed operand widths, at most 18.
    primitive : bool or None
        ``True`` forces the ``MULT18X18D`` instance, ``False`` the model; ``None`` (default)
        picks the instance exactly when the platform is an ECP5.
    enable : bool
        Add a clock enable ``ce`` for all three registers (the block's ``CE0``), for pipelines
        that stall.

    Members
    -------
    a : In(signed(a_width))
    b : In(signed(b_width))
    p : Out(signed(a_width + b_width))
    ce : In(1)
        Only with ``enable``: the registers load when it is 1.
    """

    latency = 2

    def __init__(self, a_width: int = 8, b_width: int = 8, *, primitive: bool | None = None,
                 enable: bool = False):
        for name, v in (("a_width", a_width), ("b_width", b_width)):
            if not isinstance(v, int) or not 1 <= v <= WIDTH:
                raise ValueError(f"Mult18 {name} must be an integer in 1..{WIDTH}, not {v!r}")
        self._aw, self._bw, self._primitive_choice = a_width, b_width, primitive
        members = {
            "a": In(signed(a_width)),
            "b": In(signed(b_width)),
            "p": Out(signed(a_width + b_width)),
        }
        if enable:
            members["ce"] = In(1)
        self._enable = enable
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        use = is_ecp5(platform) if self._primitive_choice is None else self._primitive_choice
        if use:
            self._primitive(m)
        else:
            a = Signal(signed(self._aw), reset_less=True)
            b = Signal(signed(self._bw), reset_less=True)
            p = Signal(signed(self._aw + self._bw), reset_less=True)
            with m.If(self.ce if self._enable else Const(1)):
                m.d.sync += [a.eq(self.a), b.eq(self.b), p.eq(a * b)]
            m.d.comb += self.p.eq(p)
        return m

    def _primitive(self, m):
        a, b = Signal(signed(WIDTH)), Signal(signed(WIDTH))
        p = Signal(signed(2 * WIDTH))
        m.d.comb += [a.eq(self.a), b.eq(self.b)]      # sign-extended to 18 bits
        ports = {}
        for i in range(WIDTH):
            ports[f"i_A{i}"] = a[i]
            ports[f"i_B{i}"] = b[i]
            ports[f"i_C{i}"] = Const(0)
        for i in range(2 * WIDTH):
            ports[f"o_P{i}"] = p[i]
        m.submodules.dsp = Instance(
            "MULT18X18D",
            p_REG_INPUTA_CLK="CLK0", p_REG_INPUTB_CLK="CLK0", p_REG_OUTPUT_CLK="CLK0",
            p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
            p_REG_INPUTA_CE="CE0", p_REG_INPUTB_CE="CE0", p_REG_OUTPUT_CE="CE0",
            p_REG_INPUTA_RST="RST0", p_REG_INPUTB_RST="RST0", p_REG_OUTPUT_RST="RST0",
            p_CLK0_DIV="ENABLED", p_GSR="DISABLED", p_RESETMODE="SYNC",
            p_SOURCEB_MODE="B_SHIFT", p_MULT_BYPASS="DISABLED", p_CAS_MATCH_REG="FALSE",
            p_HIGHSPEED_CLK="NONE",
            i_SIGNEDA=Const(1), i_SIGNEDB=Const(1), i_SOURCEA=Const(0), i_SOURCEB=Const(0),
            i_CLK0=ClockSignal("sync"), i_CLK1=Const(0), i_CLK2=Const(0), i_CLK3=Const(0),
            i_CE0=self.ce if self._enable else Const(1), i_CE1=Const(0), i_CE2=Const(0), i_CE3=Const(0),
            i_RST0=Const(0), i_RST1=Const(0), i_RST2=Const(0), i_RST3=Const(0),
            **ports,
        )
        m.d.comb += self.p.eq(p)


class Mult18Pair(wiring.Component):
    """The model and the ``MULT18X18D`` instance side by side on the same operands (for the
    equivalence test; the primitive needs a simulation model of ``MULT18X18D``)."""

    def __init__(self, a_width: int = 18, b_width: int = 18):
        self._aw, self._bw = a_width, b_width
        super().__init__({
            "a": In(signed(a_width)), "b": In(signed(b_width)),
            "p_model": Out(signed(a_width + b_width)), "p_dsp": Out(signed(a_width + b_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.model = model = Mult18(self._aw, self._bw, primitive=False)
        m.submodules.dsp = dsp = Mult18(self._aw, self._bw, primitive=True)
        m.d.comb += [model.a.eq(self.a), model.b.eq(self.b), dsp.a.eq(self.a), dsp.b.eq(self.b),
                     self.p_model.eq(model.p), self.p_dsp.eq(dsp.p)]
        return m
