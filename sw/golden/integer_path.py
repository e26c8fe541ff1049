"""The integer path's constants and their use: :class:`IntegerPath` (per layer :class:`LayerInt`),
built from activation scales (:func:`quantize_layer`, :func:`quantize_layer_scales`). Calibration
(:mod:`sw.golden.calibrate`) makes one; :mod:`sw.golden.int8` stores and loads one."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from sw.spec import quant


@dataclass
class LayerInt:
    """Integer constants of one layer (plus the float scales they came from)."""

    wg: np.ndarray              # int8 [d, d_ff]
    wu: np.ndarray              # int8 [d, d_ff]
    wd: np.ndarray              # int8 [d_ff, d]
    consts: dict                # mult_*/shift_* and lut, as sw.spec.quant.swiglu_int8 wants them
    scales: dict = field(default_factory=dict)   # s_x, s_gate, s_up, s_act, s_h, s_y, s_q, s_k


def _scale(amax: float) -> float:
    return float(amax) / quant.INT8_MAX if amax > 0 else 1.0


def _mult_shift(scale):
    mult, shift = quant.scale_to_mult_shift(scale)
    return mult, shift


def quantize_layer(mlp, amax: dict) -> LayerInt:
    """Integer constants for one SwiGLU MLP (``nn.Module`` with gate/up/down projections), from the
    calibration maxima ``amax`` of x, gate, up, act, h, y, q and k."""
    return quantize_layer_scales(mlp, {f"s_{k}": _scale(amax[k]) for k in ("x", "gate", "up", "act", "h", "y",
                                                                         "q", "k")})


def quantize_layer_scales(mlp, scales: dict) -> LayerInt:
    """Integer constants for one SwiGLU MLP from its activation scales ``s_x .. s_k``.

    Everything here is deterministic IEEE arithmetic (weight maxima, divisions, rounding) except the
    SiLU table, which calls ``exp``; the constants are stored (:mod:`sw.golden.int8`) rather than rebuilt.
    """
    wg_f = mlp.gate_proj.weight.detach().double().numpy().T       # [d, d_ff]
    wu_f = mlp.up_proj.weight.detach().double().numpy().T
    wd_f = mlp.down_proj.weight.detach().double().numpy().T       # [d_ff, d]
    wg, s_wg = quant.quantize_weight(wg_f)
    wu, s_wu = quant.quantize_weight(wu_f)
    wd, s_wd = quant.quantize_weight(wd_f)
    s = {k: float(scales[f"s_{k}"]) for k in ("x", "gate", "up", "act", "h", "y", "q", "k")}
    mult_g, shift_g = _mult_shift(s["x"] * s_wg / s["gate"])
    mult_u, shift_u = _mult_shift(s["x"] * s_wu / s["up"])
    mult_h, shift_h = _mult_shift(s["act"] * s["up"] / s["h"])
    mult_d, shift_d = _mult_shift(s["h"] * s_wd / s["y"])
    consts = {
        "mult_g": mult_g, "shift_g": shift_g, "mult_u": mult_u, "shift_u": shift_u,
        "lut": quant.silu_lut(s["gate"], s["act"]),
        "mult_h": mult_h[0], "shift_h": shift_h[0],
        "mult_d": mult_d, "shift_d": shift_d,
    }
    return LayerInt(wg=wg, wu=wu, wd=wd, consts=consts, scales={f"s_{k}": v for k, v in s.items()})


class IntegerPath:
    """Integer MLP and integer TAS for every layer of a model.

    Parameters
    ----------
    layers : list of LayerInt
    n_heads, head_dim : int
        Attention geometry (for the TAS threshold).
    """

    def __init__(self, layers: list[LayerInt], n_heads: int, head_dim: int):
        self.layers = layers
        self.n_heads = n_heads
        self.head_dim = head_dim

    # -- the MLP ------------------------------------------------------------------------------
    def quantize_x(self, layer: int, x) -> np.ndarray:
        return quant.quantize_activation(np.asarray(x, dtype=np.float64), self.layers[layer].scales["s_x"])

    def mlp_int(self, layer: int, x_q) -> np.ndarray:
        """int8 [rows, d] -> int8 [rows, d]."""
        L = self.layers[layer]
        return quant.swiglu_int8(x_q, L.wg, L.wu, L.wd, L.consts)

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Float in, float out, integer inside: the MLP override for :class:`sw.model.decoder.Decoder`."""
        y_q = self.mlp_int(layer, self.quantize_x(layer, x.detach().cpu().numpy()))
        if x.dtype == torch.float64:
            return torch.from_numpy(y_q.astype(np.float64) * self.layers[layer].scales["s_y"])
        return torch.from_numpy(y_q.astype(np.float32) * np.float32(self.layers[layer].scales["s_y"]))

    # -- the temporal attention score ---------------------------------------------------------
    def quantize_qk(self, layer: int, q, k_prev) -> tuple[np.ndarray, np.ndarray]:
        s = self.layers[layer].scales
        return (quant.quantize_activation(np.asarray(q, dtype=np.float64), s["s_q"]),
                quant.quantize_activation(np.asarray(k_prev, dtype=np.float64), s["s_k"]))

    def threshold(self, layer: int, tau: float, *, strict: bool = False) -> int:
        s = self.layers[layer].scales
        return quant.tas_threshold(tau, s["s_q"], s["s_k"], self.n_heads, self.head_dim, strict=strict)

    def tas_int(self, layer: int, q, k_prev) -> np.ndarray:
        q_q, k_q = self.quantize_qk(layer, q, k_prev)
        return quant.tas_int(q_q, k_q)

    # -- plugging into the model --------------------------------------------------------------
    def install(self, model, *, replay: bool = True) -> None:
        """Use the integer MLP (and, if ``replay``, integer replay decisions) in ``model``."""
        model.set_mlp_override(self.mlp)
        if replay:
            model.set_replay_rule(self.replay_rule)

    def replay_rule(self, layer: int, q: torch.Tensor, k_prev: torch.Tensor, tau: float,
                    strict: bool) -> torch.Tensor:
        """Integer replay decision: ``tas_int(q_q, k_q) >= T(tau)``."""
        score = self.tas_int(layer, q.detach().cpu().numpy(), k_prev.detach().cpu().numpy())
        th = self.threshold(layer, tau, strict=strict)
        return torch.from_numpy(quant.replay_decision(score, th))
