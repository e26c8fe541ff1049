"""Export a golden GEMM-tile trace from a PyTorch layer through the quantisation spec.

The float side is a PyTorch ``nn.Linear`` (no bias, as in LLaMA's MLP) fed with a batch of
activations; the spec in ``sw/quant.py`` turns weights, activations and the output scale into
int8 tensors and integer requantisation parameters, and the integer golden model computes the
expected int8 output. The result is a trace directory (``golden/README.md``) that ``nox -s sim``
checks the RTL against, bit for bit.

Usage::

    python sw/export_trace.py --out build/traces/gemm_tile          # default tile geometry
    python sw/export_trace.py --out DIR --batch 32 --seed 3 --force
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from sw import quant
from sw.config import DEFAULT_TILE, ConfigError, TileConfig
from sw.trace import TraceError, write_gemm_trace


def quantize_linear(weight: np.ndarray, x: np.ndarray, y_float: np.ndarray):
    """Quantise one linear layer and its input/output by the spec.

    Parameters
    ----------
    weight : ndarray [K, N]
        Float weights (``y = x @ weight``).
    x : ndarray [B, K]
        Float activations.
    y_float : ndarray [B, N]
        Float reference output, used only to choose the output scale.

    Returns
    -------
    dict with int8 ``x``, ``w``, ``y`` and integer ``mult``, ``shift``, plus the float scales.
    """
    w_q, s_w = quant.quantize_weight(weight)
    s_x = quant.activation_scale(x)
    s_y = quant.activation_scale(y_float)
    x_q = quant.quantize_activation(x, s_x)
    mult, shift = quant.scale_to_mult_shift(s_x * s_w / s_y)
    y_q = quant.gemm_int8(x_q, w_q, mult, shift)
    return {"x": x_q, "w": w_q, "mult": mult, "shift": shift, "y": y_q, "s_x": s_x, "s_y": s_y}


def export_linear_trace(out, tile: TileConfig = DEFAULT_TILE, *, batch: int = 16, seed: int = 0,
                        force: bool = False) -> dict:
    """Build a seeded ``torch.nn.Linear`` of the tile's shape, quantise it and write the trace."""
    import torch

    torch.manual_seed(seed)
    layer = torch.nn.Linear(tile.k_dim, tile.n_dim, bias=False)
    # Activations like an MLP input after RMSNorm: roughly unit scale, with a few outliers.
    x = torch.randn(batch, tile.k_dim) * (1 + 2 * (torch.rand(batch, tile.k_dim) > 0.97))
    with torch.no_grad():
        y = layer(x)
    weight = layer.weight.detach().double().numpy().T          # [K, N]
    q = quantize_linear(weight, x.double().numpy(), y.double().numpy())
    y_deq = q["y"].astype(np.float64) * q["s_y"]
    rel_err = float(np.linalg.norm(y_deq - y.double().numpy()) / np.linalg.norm(y.double().numpy()))
    src = (f"torch.nn.Linear({tile.k_dim}, {tile.n_dim}, bias=False), torch.manual_seed({seed}), "
           f"batch {batch}; torch {torch.__version__}; int8 output relative error {rel_err:.4f}")
    write_gemm_trace(out, tile, x=q["x"], w=q["w"], mult=q["mult"], shift=q["shift"], y=q["y"],
                     source=src, force=force)
    return {"out": str(out), "batch": batch, "relative_error": rel_err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("build/traces/gemm_tile"),
                    help="trace directory to write (default: %(default)s)")
    ap.add_argument("--tile", type=Path, default=None,
                    help="tile geometry as JSON (default: the built-in default tile)")
    ap.add_argument("--batch", type=int, default=16, help="rows of activations (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing trace directory")
    args = ap.parse_args(argv)
    try:
        if args.batch < 1:
            raise TraceError(f"--batch must be at least 1, not {args.batch}")
        tile = TileConfig.from_json(args.tile) if args.tile else DEFAULT_TILE
        info = export_linear_trace(args.out, tile, batch=args.batch, seed=args.seed, force=args.force)
    except (TraceError, ConfigError, quant.QuantError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {info['out']}: {info['batch']} rows, tile {tile.to_dict()}, "
          f"int8 vs float relative error {info['relative_error']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
