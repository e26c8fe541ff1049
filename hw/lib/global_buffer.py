"""A high-fan-out control net on the FPGA's clock network: a ``DCCA`` on ECP5, a wire elsewhere."""

from amaranth import Const, Instance, Signal

from hw.lib.mult18 import is_ecp5

__all__ = ["global_buffer"]


def global_buffer(m, platform, signal, name):
    """Return ``signal`` driven through a global buffer, for a net that reaches many flip-flops.

    nextpnr-ecp5 promotes only clocks to the global network by itself. A reset that drives the
    ``LSR`` pins of tens of thousands of flip-flops through general routing is slow and congests
    the router (``python -m hw.flow.fanout`` lists such nets), so the board builds put theirs on a
    ``DCCA`` by hand. ``signal`` should come straight from a flip-flop: the buffer adds its
    insertion delay to whatever drives it. On other platforms (simulation, Verilog for cocotb)
    the net is ``signal`` itself.

    Parameters
    ----------
    m : Module
        Module that receives the buffer instance (as submodule ``name``).
    platform : Platform or None
        The build's platform; only an ECP5 gets the ``DCCA``.
    signal : Signal
        One-bit net to buffer.
    name : str
        Name of the instance and of the buffered net.
    """
    if not is_ecp5(platform):
        return signal
    buffered = Signal(name=f"{name}_g")
    m.submodules[name] = Instance("DCCA", i_CLKI=signal, i_CE=Const(1), o_CLKO=buffered)
    return buffered
