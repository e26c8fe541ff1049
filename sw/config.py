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
from dataclasses import dataclass

from sw.golden import quant
from sw.jsonio import read_json


class ConfigError(ValueError):
    """A configuration value that cannot be built or would overflow the arithmetic."""


def _read_json(path) -> dict:
    """The JSON in ``path``, or one :class:`ConfigError` naming the file."""
    return read_json(path, ConfigError, "config", obj=False)


def _from_dict(cls, d, source: str, what: str):
    """``cls(**d)`` for a config dataclass, refusing unknown fields with one clear message."""
    if not isinstance(d, dict):
        raise ConfigError(f"{source}: expected a JSON object, not {type(d).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown {what} field(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**d)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


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
        """Issue cycles for ``batch`` rows once the pipeline is full (see ``hw/accel/gemm_tile.py``)."""
        return batch * self.k_tiles * self.n_tiles

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "config") -> TileConfig:
        return _from_dict(cls, d, source, "tile config")

    @classmethod
    def from_json(cls, path) -> TileConfig:
        return cls.from_dict(_read_json(path), source=str(path))

#: Sizes of the shipped video model (``sw/model/train.py`` trains it with these; the checkpoint's
#: ``config.json`` repeats them and a test checks that the two agree).
SHIPPED_MODEL = {"d_model": 96, "n_layers": 4, "n_heads": 4, "d_ff": 256}

#: The default geometry used by ``nox -s sim``, ``nox -s synth`` and the tests: a 4x4 array whose
#: tile is the shipped model's first MLP projection (K = d_model, N = d_ff).
DEFAULT_TILE = TileConfig(rows=4, cols=4, k_dim=SHIPPED_MODEL["d_model"], n_dim=SHIPPED_MODEL["d_ff"])


@dataclass(frozen=True)
class AccelConfig:
    """The whole accelerator: model sizes it serves and how the hardware is cut up.

    Parameters
    ----------
    d_model, d_ff, layers : int
        MLP sizes and the number of layers whose weights are held on chip.
    tokens_per_frame, batch : int
        Replay-cache geometry (``N`` positions, ``B`` rows per group; ``batch`` a power of two).
    rows, cols : int
        Systolic array of every GEMM tile.
    cores : int
        MLP cores. They share one copy of the weights (two cores: the two ports of each block RAM).
    chunks : int
        Hidden chunks a row is cut into; the unit of work the dispatcher hands out.
    gate_lanes, tas_lanes : int
        Elements per cycle of the gating stage and products per cycle of the TAS unit.
    mv_in, mv_out : int
        v2 datapath: each core is a weight-resident ``mv_in x mv_out`` matrix-vector unit
        (``mv_in`` activations times ``mv_out`` outputs per cycle, one MAC each).
    datapath : int
        Which MLP datapath the accelerator is built with: 1, three systolic GEMM tiles per core
        (:class:`hw.accel.accelerator.Accelerator`), or 2, one matrix-vector unit per core
        (:class:`hw.accel.accelerator_v2.AcceleratorV2`).
    """

    d_model: int = SHIPPED_MODEL["d_model"]
    d_ff: int = SHIPPED_MODEL["d_ff"]
    layers: int = SHIPPED_MODEL["n_layers"]
    tokens_per_frame: int = 64
    batch: int = 4
    rows: int = 4
    cols: int = 4
    cores: int = 2
    chunks: int = 8
    gate_lanes: int = 2
    tas_lanes: int = 16
    mv_in: int = 8
    mv_out: int = 8
    datapath: int = 2

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"accelerator config field '{f.name}' must be a positive integer, "
                                  f"not {v!r}")
        if self.datapath not in (1, 2):
            raise ConfigError(f"accelerator config: datapath must be 1 or 2, not {self.datapath!r}")
        if self.batch & (self.batch - 1):
            raise ConfigError(f"accelerator config: batch={self.batch} is not a power of two")
        if self.d_ff % self.chunks:
            raise ConfigError(f"accelerator config: d_ff={self.d_ff} is not a multiple of "
                              f"chunks={self.chunks}")
        f = self.d_ff // self.chunks
        for name, n, m in (("d_model", self.d_model, self.rows), ("d_model", self.d_model, self.cols),
                           ("d_ff / chunks", f, self.rows), ("d_ff / chunks", f, self.cols),
                           ("d_ff / chunks", f, self.gate_lanes), ("d_model", self.d_model, self.tas_lanes),
                           ("d_model", self.d_model, self.mv_in), ("d_model", self.d_model, self.mv_out),
                           ("d_ff / chunks", f, self.mv_in), ("d_ff / chunks", f, self.mv_out)):
            if n % m:
                raise ConfigError(f"accelerator config: {name}={n} is not a multiple of {m}")
        try:
            quant.check_accumulator(self.d_ff, what="d_ff")
        except ValueError as e:
            raise ConfigError(f"accelerator config: {e}") from None

    @property
    def chunk_width(self) -> int:
        return self.d_ff // self.chunks

    @property
    def gate_tile(self) -> TileConfig:
        """Gate and up projection of one chunk: ``d_model x d_ff / chunks``."""
        return TileConfig(rows=self.rows, cols=self.cols, k_dim=self.d_model, n_dim=self.chunk_width)

    @property
    def down_tile(self) -> TileConfig:
        """Down projection of one chunk: ``d_ff / chunks x d_model``."""
        return TileConfig(rows=self.rows, cols=self.cols, k_dim=self.chunk_width, n_dim=self.d_model)

    @property
    def macs(self) -> int:
        """MAC units: three tiles per core."""
        return 3 * self.rows * self.cols * self.cores

    @property
    def mac_units(self) -> int:
        """MAC units of the datapath this configuration builds."""
        return self.mv_macs if self.datapath == 2 else self.macs

    @property
    def mv_macs(self) -> int:
        """MAC units of the v2 datapath: one ``mv_in x mv_out`` unit per core."""
        return self.mv_in * self.mv_out * self.cores

    @property
    def mv_blocks_per_chunk(self) -> tuple[int, int]:
        """Weight blocks (``mv_in x mv_out`` each) of one chunk's GU pass (gate and up) and D pass
        (down); one block is one cycle of a core."""
        f = self.chunk_width
        gu = 2 * (self.d_model // self.mv_in) * (f // self.mv_out)
        dn = (f // self.mv_in) * (self.d_model // self.mv_out)
        return gu, dn

    @property
    def mv_weight_blocks(self) -> int:
        """Weight blocks of every layer and chunk: the depth of the v2 weight store."""
        return self.layers * self.chunks * sum(self.mv_blocks_per_chunk)

    @property
    def gu_sum_bits(self) -> int:
        """Width of a gate or up sum (``d_model`` products)."""
        return quant.sum_bits(self.d_model)

    @property
    def row_sum_bits(self) -> int:
        """Width of a down-projection row sum (``d_ff`` products, over every chunk)."""
        return quant.sum_bits(self.d_ff)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "config") -> AccelConfig:
        return _from_dict(cls, d, source, "accelerator config")

    @classmethod
    def from_json(cls, path) -> AccelConfig:
        return cls.from_dict(_read_json(path), source=str(path))

#: The accelerator that ``nox -s sim`` and ``nox -s synth`` build: the shipped model, two cores.
DEFAULT_ACCEL = AccelConfig()
