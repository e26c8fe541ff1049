"""The one configuration that drives software, golden model, gateware and testbenches.

Everything that has a size lives here: array geometry, tile dimensions and the widths of the
quantisation arithmetic. ``hw/`` builds gateware from a :class:`TileConfig`, ``tb/`` reads the
same object to size its bus models, and trace files record it so that a trace made for another
geometry is refused with a clear message instead of a wrong answer.

Changing the array size means changing :data:`DEFAULT_TILE` (or passing another
:class:`TileConfig`), nothing else.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from sw import quant


class ConfigError(ValueError):
    """A configuration value that cannot be built or would overflow the arithmetic."""


@dataclass(frozen=True)
class TileConfig:
    """Geometry of one int8 GEMM tile: ``y[B, N] = requant(x[B, K] @ w[K, N])``.

    Parameters
    ----------
    rows : int
        Systolic array rows. Each row handles one slice of the reduction dimension K per cycle.
    cols : int
        Systolic array columns. Each column handles one output channel per cycle.
    k_dim : int
        Reduction dimension K of the tile; a multiple of ``rows``.
    n_dim : int
        Output channels N of the tile; a multiple of ``cols``.
    acc_bits : int
        Accumulator width (the quantisation spec fixes int32).
    """

    rows: int = 4
    cols: int = 4
    k_dim: int = 64
    n_dim: int = 32
    acc_bits: int = quant.ACC_BITS

    def __post_init__(self):
        for name in ("rows", "cols", "k_dim", "n_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"tile config field '{name}' must be a positive integer, not {value!r}")
        if self.k_dim % self.rows:
            raise ConfigError(f"tile config: k_dim={self.k_dim} is not a multiple of rows={self.rows}")
        if self.n_dim % self.cols:
            raise ConfigError(f"tile config: n_dim={self.n_dim} is not a multiple of cols={self.cols}")
        if self.acc_bits != quant.ACC_BITS:
            raise ConfigError(
                f"tile config: acc_bits={self.acc_bits} differs from the quantisation spec "
                f"(int{quant.ACC_BITS} accumulation)"
            )
        # The static overflow proof: see quant.check_accumulator.
        try:
            quant.check_accumulator(self.k_dim, self.acc_bits, what="k_dim")
        except ValueError as e:
            raise ConfigError(f"tile config: {e}") from None

    @property
    def k_tiles(self) -> int:
        """Number of K slices of ``rows`` elements."""
        return self.k_dim // self.rows

    @property
    def n_tiles(self) -> int:
        """Number of N slices of ``cols`` channels."""
        return self.n_dim // self.cols

    @property
    def weight_depth(self) -> int:
        """Words of weight memory per processing element."""
        return self.k_tiles * self.n_tiles

    def cycles(self, batch: int) -> int:
        """Issue cycles for ``batch`` rows once the pipeline is full (see ``hw/gemm_tile.py``)."""
        return batch * self.k_tiles * self.n_tiles

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "config") -> TileConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: expected a JSON object, not {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown tile config field(s) {unknown}; known: {sorted(known)}")
        try:
            return cls(**d)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_json(cls, path) -> TileConfig:
        try:
            with open(path) as f:
                d = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(d, source=str(path))


#: Sizes of the shipped video model (``sw/train.py`` trains it with these; the checkpoint's
#: ``config.json`` repeats them and a test checks that the two agree).
SHIPPED_MODEL = {"d_model": 96, "n_layers": 4, "n_heads": 4, "d_ff": 256}

#: The default geometry used by ``nox -s sim``, ``nox -s synth`` and the tests: a 4x4 array whose
#: tile is the shipped model's first MLP projection (K = d_model, N = d_ff).
DEFAULT_TILE = TileConfig(rows=4, cols=4, k_dim=SHIPPED_MODEL["d_model"], n_dim=SHIPPED_MODEL["d_ff"])
