"""Copies of a registered control bit, one per group of its loads, that synthesis keeps apart."""

from amaranth import Cat, ClockSignal, Const, Instance, ResetSignal, Signal, Value

from hw.lib.mult18 import is_ecp5

__all__ = ["ff_copies", "word_copies"]


def ff_copies(m, platform, d, n, name, *, init=0):
    """``n`` flip-flops that all register ``d``; return their outputs.

    An enable computed a cycle ahead (``d`` is its next value) that reaches hundreds of flip-flops
    spread over the die is one net from one flip-flop, as slow as its farthest load. With a copy per
    group of loads, each copy can sit beside its group. Yosys merges flip-flops with the same
    input, however their wires are marked, so on an ECP5 each copy is a ``TRELLIS_FF`` instance of
    its own with the ``keep`` attribute. Elsewhere (simulation, Verilog for cocotb) the copies are
    ordinary registers, with the same behaviour: each equals ``d`` of the previous cycle, and
    ``init`` while the domain is in reset.

    Parameters
    ----------
    m : Module
        Module that receives the copies (as submodules ``{name}_{k}`` on an ECP5).
    platform : Platform or None
        The build's platform.
    d : Value
        One-bit next value.
    n : int
        Number of copies, at least 1.
    name : str
        Prefix of the copies' names.
    init : int
        Value in reset (0 or 1).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"ff_copies needs a positive number of copies, not {n!r}")
    if init not in (0, 1):
        raise ValueError(f"ff_copies init must be 0 or 1, not {init!r}")
    qs = [Signal(name=f"{name}_{k}", init=init) for k in range(n)]
    if not is_ecp5(platform):
        m.d.sync += [q.eq(d) for q in qs]
        return qs
    for k, q in enumerate(qs):
        m.submodules[f"{name}_{k}"] = Instance(
            "TRELLIS_FF", a_keep=1,
            p_GSR="DISABLED", p_CEMUX="1", p_CLKMUX="CLK", p_LSRMUX="LSR",
            p_REGSET="SET" if init else "RESET", p_SRMODE="LSR_OVER_CE",
            i_CLK=ClockSignal(), i_LSR=ResetSignal(), i_CE=Const(1), i_DI=d, o_Q=q,
        )
    return qs


def word_copies(m, platform, d, n, name):
    """``n`` registers that all hold ``d`` of the previous cycle (0 in reset); return them.

    :func:`ff_copies` bit by bit: for a registered address that fans out to many memories, one
    copy per memory, which the placer can put beside it.

    Parameters
    ----------
    m, platform, n, name
        As for :func:`ff_copies`.
    d : Value
        Next value, of any width.
    """
    d = Value.cast(d)
    bits = [ff_copies(m, platform, d[b], n, f"{name}_b{b}") for b in range(len(d))]
    return [Cat(*(bits[b][k] for b in range(len(d)))) for k in range(n)]
