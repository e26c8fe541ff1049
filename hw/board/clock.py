"""The board's clock and LEDs: the ``sync`` domain from the oscillator through an ``EHXPLLL``,
and the LED pins. Shared by the board top (:class:`hw.board.top.BoardTop`) and the synthesis
harness (:class:`hw.flow.synth.HarnessTop`); the PLL's dividers come from
:func:`hw.flow.synth.compute_pll`."""

from amaranth import Cat, ClockDomain, Instance, Signal

from hw.lib.global_buffer import global_buffer

__all__ = ["add_pll_domain", "request_leds"]


def add_pll_domain(m, platform, board, pll):
    """Add the ``sync`` domain to ``m``: the board's oscillator (``[clock] resource``) through an
    ``EHXPLLL`` set to ``pll`` (:func:`compute_pll`), held in reset until the PLL has locked.

    This is the only clock code of the board builds: the board top (:class:`hw.board.top.BoardTop`)
    and the synthesis harness (:class:`hw.flow.synth.HarnessTop`) both call it. Nothing here can be simulated;
    simulations take the ``sync`` domain's clock directly.
    """
    clk_in = platform.request(board["clock"]["resource"], 0)
    m.domains.sync = cd_sync = ClockDomain("sync")
    locked = Signal()
    mhz = f"{pll.fout_mhz:.6g}"
    m.submodules.pll = Instance(
        "EHXPLLL",
        a_FREQUENCY_PIN_CLKI=f"{pll.fin_mhz:.6g}",
        a_FREQUENCY_PIN_CLKOP=mhz,
        a_ICP_CURRENT="12", a_LPF_RESISTOR="8",
        a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
        p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED",
        p_STDBY_ENABLE="DISABLED", p_DPHASE_SOURCE="DISABLED",
        p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
        p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
        p_CLKI_DIV=pll.clki_div, p_CLKFB_DIV=pll.clkfb_div,
        p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=pll.clkop_div,
        p_CLKOP_CPHASE=pll.clkop_cphase, p_CLKOP_FPHASE=0,
        p_FEEDBK_PATH="CLKOP",
        i_CLKI=clk_in.i, i_CLKFB=cd_sync.clk, o_CLKOP=cd_sync.clk,
        i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1,
        i_PHASESTEP=1, i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0,
        o_LOCK=locked,
    )
    # sync stays in reset until the PLL has locked and LOCK has crossed 4 flops (which
    # start at 1 from configuration). A plain synchronous reset: LOCK is asynchronous,
    # but its release reaches the design only through this shift register.
    lock_sync = Signal(4, init=0b1111, reset_less=True)
    m.d.sync += lock_sync.eq(Cat(lock_sync[1:], ~locked))
    m.d.comb += cd_sync.rst.eq(global_buffer(m, platform, lock_sync[0], "sync_rst_buf"))
    # No add_clock_constraint here: nextpnr derives CLKOP's constraint from the
    # FREQUENCY PORT of clk25 and the dividers ("Derived frequency constraint of ...").
    # (Amaranth would write FREQUENCY NET "harness.dut.clk", a name nextpnr does not
    # find: it warns and ignores it.)


def request_leds(platform, board):
    """The output pins of the board's LEDs (``[leds] resource`` and ``count``)."""
    return [platform.request(board["leds"]["resource"], i).o for i in range(board["leds"]["count"])]
