"""The top level that ``nox -s synth`` builds: the accelerator of the default configuration."""

from hw.accel.accelerator import Accelerator
from hw.accel.gemm_tile import GemmTile
from sw.config import DEFAULT_ACCEL, AccelConfig, TileConfig

__all__ = ["make_top", "make_accelerator"]


def make_accelerator(cfg: AccelConfig):
    """The accelerator of ``cfg``'s datapath: :class:`hw.accel.accelerator.Accelerator` (1) or
    :class:`hw.accel.accelerator_v2.AcceleratorV2` (2). Both have the same streams and counters."""
    if cfg.datapath == 2:
        from hw.accel.accelerator_v2 import AcceleratorV2
        return AcceleratorV2(cfg)
    return Accelerator(cfg)


def make_top(design: AccelConfig | TileConfig = DEFAULT_ACCEL):
    """The whole accelerator (:func:`make_accelerator`) for an :class:`AccelConfig`, or a lone
    :class:`hw.accel.gemm_tile.GemmTile` for a :class:`TileConfig` (small synthesis checks)."""
    if isinstance(design, TileConfig):
        return GemmTile(design)
    if isinstance(design, AccelConfig):
        return make_accelerator(design)
    raise TypeError(f"make_top: expected an AccelConfig or a TileConfig, not {design!r}")
