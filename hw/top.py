"""The current top level of the accelerator: the GEMM tile of the default configuration."""

from hw.gemm_tile import GemmTile
from sw.config import DEFAULT_TILE, TileConfig

__all__ = ["Top"]


class Top(GemmTile):
    """Top level built by ``nox -s synth`` and simulated by ``nox -s sim``.

    Parameters
    ----------
    cfg : TileConfig
        Geometry; :data:`sw.config.DEFAULT_TILE` unless given.
    """

    def __init__(self, cfg: TileConfig = DEFAULT_TILE):
        super().__init__(cfg)
