"""Restoring division, one quotient bit a cycle: the step every divider of the gateware takes."""

from amaranth import *


def restoring_step(m: Module, rem, quo, bit, den) -> None:
    """One cycle of restoring division, in ``m``'s ``sync`` domain.

    The next numerator bit ``bit`` is shifted into the partial remainder ``rem`` (its top bit
    dropped: ``rem`` is one bit wider than ``den`` needs); where the result is at least ``den``,
    ``den`` is subtracted and a 1 shifted into the quotient ``quo``, else a 0. After as many steps
    as the numerator has bits, from its top bit down, ``quo`` is the floor of numerator / ``den``
    and ``rem`` the remainder (for ``den > 0``; the caller keeps ``den`` from 0).

    Parameters
    ----------
    m : Module
        Where the step is built (inside the caller's ``m.If`` or FSM state).
    rem, quo : Signal
        The partial remainder and the quotient, registers of the caller.
    bit : Value
        The numerator's next bit (1 bit).
    den : Value
        The divisor.
    """
    nrem = Cat(bit, rem[:-1])
    with m.If(nrem >= den):
        m.d.sync += [rem.eq(nrem - den), quo.eq(Cat(1, quo[:-1]))]
    with m.Else():
        m.d.sync += [rem.eq(nrem), quo.eq(Cat(0, quo[:-1]))]
