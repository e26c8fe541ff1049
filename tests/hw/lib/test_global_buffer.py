"""hw.lib.global_buffer: a DCCA on ECP5, the net itself elsewhere."""

from amaranth import Module, Signal
from amaranth.back import rtlil

from hw.lib.global_buffer import global_buffer


class FakeEcp5:
    family = "ecp5"


def test_wire_off_ecp5():
    m, s = Module(), Signal()
    assert global_buffer(m, None, s, "buf") is s


def test_dcca_on_ecp5():
    m, s = Module(), Signal()
    g = global_buffer(m, FakeEcp5(), s, "rst_buf")
    assert g is not s
    m.d.sync += Signal(name="x").eq(g)
    text = rtlil.convert(m, ports=[s])
    assert "DCCA" in text and "rst_buf" in text
    cell = text[text.index("cell \\DCCA"):]
    cell = cell[:cell.index("end")]
    assert "connect \\CLKI" in cell and "connect \\CLKO" in cell and "connect \\CE 1'1" in cell
