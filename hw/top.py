"""The top level that ``nox -s synth`` builds: the accelerator of the default configuration."""

from hw.accelerator import Accelerator
from hw.gemm_tile import GemmTile
from sw.config import DEFAULT_ACCEL, AccelConfig, TileConfig

__all__ = ["make_top"]


def make_top(design: AccelConfig | TileConfig = DEFAULT_ACCEL):
    """The whole :class:`hw.accelerator.Accelerator` for an :class:`AccelConfig`, or a lone
    :class:`hw.gemm_tile.GemmTile` for a :class:`TileConfig` (small synthesis checks)."""
    if isinstance(design, TileConfig):
        return GemmTile(design)
    if isinstance(design, AccelConfig):
        return Accelerator(design)
    raise TypeError(f"make_top: expected an AccelConfig or a TileConfig, not {design!r}")
