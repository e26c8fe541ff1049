"""MLP core: the int8 SwiGLU MLP of one layer on systolic GEMM tiles."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.gemm_tile import GemmTile
from hw.swiglu_gate import SwigluGate, h_params_layout
from sw.config import TileConfig

__all__ = ["MlpCore"]


class MlpCore(wiring.Component):
    """``y = down(requant(silu(gate(x)) * up(x)))`` bit-exact with :func:`sw.quant.swiglu_int8`.

    Three :class:`hw.gemm_tile.GemmTile` instances (gate and up: K = d, N = d_ff; down: K = d_ff,
    N = d) around a :class:`hw.swiglu_gate.SwigluGate`. The gate and up tiles take the same ``x``
    row together and deliver their rows together; the down tile runs while the next row's gate and
    up are computed. Weights and constants are loaded over their streams and stay on chip.

    Per row, once the pipeline is full, the core needs ``max(d * d_ff / (rows * cols),
    d_ff / lanes + 2)`` cycles (the GEMM tiles dominate).

    Parameters
    ----------
    d_model, d_ff : int
    rows, cols : int
        Systolic array geometry of each tile.
    lanes : int
        Elements per cycle of the gating stage.

    Members
    -------
    i, o : x rows in, y rows out (``ArrayLayout(signed(8), d_model)``)
    wg, wu, wd, rqg, rqu, rqd : weight and requantisation loads of the three tiles
    lut : SiLU table load; ``h`` : the gated product's ``(mult, shift)``
    """

    def __init__(self, d_model, d_ff, *, rows=4, cols=4, lanes=8):
        self._gate = GemmTile(TileConfig(rows=rows, cols=cols, k_dim=d_model, n_dim=d_ff))
        self._up = GemmTile(TileConfig(rows=rows, cols=cols, k_dim=d_model, n_dim=d_ff))
        self._down = GemmTile(TileConfig(rows=rows, cols=cols, k_dim=d_ff, n_dim=d_model))
        self._act = SwigluGate(d_ff, lanes)
        members = {
            "i": In(stream.Signature(data.ArrayLayout(signed(8), d_model))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), d_model))),
            "lut": In(self._act.signature.members["lut"].signature.flip()),
            "h": In(h_params_layout()),
        }
        for name, tile in (("g", self._gate), ("u", self._up), ("d", self._down)):
            members[f"w{name}"] = In(tile.signature.members["w"].signature.flip())
            members[f"rq{name}"] = In(tile.signature.members["rq"].signature.flip())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.gate = gate = self._gate
        m.submodules.up = up = self._up
        m.submodules.act = act = self._act
        m.submodules.down = down = self._down

        for name, tile in (("g", gate), ("u", up), ("d", down)):
            wiring.connect(m, wiring.flipped(getattr(self, f"w{name}")), tile.w)
            wiring.connect(m, wiring.flipped(getattr(self, f"rq{name}")), tile.rq)
        wiring.connect(m, wiring.flipped(self.lut), act.lut)
        m.d.comb += act.params.eq(self.h)

        # Fork: gate and up take each x row in the same cycle.
        both = gate.i.ready & up.i.ready
        m.d.comb += [
            gate.i.p.eq(self.i.p), up.i.p.eq(self.i.p),
            gate.i.valid.eq(self.i.valid & both), up.i.valid.eq(self.i.valid & both),
            self.i.ready.eq(both),
        ]
        # Join: their rows leave in the same order, one pair at a time.
        pair = gate.o.valid & up.o.valid
        m.d.comb += [
            act.i.p.gate.eq(gate.o.p), act.i.p.up.eq(up.o.p), act.i.valid.eq(pair),
            gate.o.ready.eq(pair & act.i.ready), up.o.ready.eq(pair & act.i.ready),
        ]
        wiring.connect(m, act.o, down.i)
        wiring.connect(m, down.o, wiring.flipped(self.o))
        return m
