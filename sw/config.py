"""The one configuration that drives software, golden model, gateware and testbenches.

Everything that has a size lives here: the model's MLP sizes, the accelerator's geometry (cores,
chunks, matrix-vector unit, TAS lanes) and, through :mod:`sw.spec.quant`, the widths of the
quantisation arithmetic. ``hw/`` builds gateware from an :class:`AccelConfig`, ``tb/`` reads the same
object to size its bus models, and the host refuses a trace made for other sizes with a clear
message instead of a wrong answer.

Changing the array size means changing :data:`DEFAULT_ACCEL` (or passing another
:class:`AccelConfig`, e.g. ``nox -s synth -- --accel A.json``), nothing else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sw.jsonio import read_json
from sw.spec import quant


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


#: Sizes of the shipped video model (``sw/model/train.py`` trains it with these; the checkpoint's
#: ``config.json`` repeats them and a test checks that the two agree).
SHIPPED_MODEL = {"d_model": 96, "n_layers": 4, "n_heads": 4, "d_ff": 256}


#: Cycles from a D block's accumulator read in a core to its write being visible to the next read of
#: the same block (read, add, write; hw/accel/mv_core.py): a D pass must be at least this long.
ACC_WRITE_DISTANCE = 3


@dataclass(frozen=True)
class AccelConfig:
    """The whole accelerator: model sizes it serves and how the hardware is cut up.

    Parameters
    ----------
    d_model, d_ff, layers : int
        MLP sizes and the number of layers whose weights are held on chip.
    tokens_per_frame, batch : int
        Replay-cache geometry (``N`` positions, ``B`` rows per group; ``batch`` a power of two).
    cores : int
        MLP cores. They share one copy of the weights (two cores: the two ports of each block RAM).
    chunks : int
        Hidden chunks a row is cut into; the unit of work the dispatcher hands out.
    tas_lanes : int
        Lanes of each TAS engine: it adds the one-bit products ``(k bit j) ? q : 0`` of
        ``tas_lanes`` elements per cycle, one bit plane of ``k`` at a time, so a row takes
        ``8 * d_model / tas_lanes`` cycles.
    mv_in, mv_out : int
        Each core is a weight-resident ``mv_in x mv_out`` matrix-vector unit (``mv_in`` activations
        times ``mv_out`` outputs per cycle, one MAC each).
    """

    d_model: int = SHIPPED_MODEL["d_model"]
    d_ff: int = SHIPPED_MODEL["d_ff"]
    layers: int = SHIPPED_MODEL["n_layers"]
    tokens_per_frame: int = 64
    batch: int = 4
    cores: int = 2
    chunks: int = 8
    tas_lanes: int = SHIPPED_MODEL["d_model"]
    mv_in: int = 8
    mv_out: int = 8

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"accelerator config field '{f.name}' must be a positive integer, "
                                  f"not {v!r}")
        if self.batch & (self.batch - 1):
            raise ConfigError(f"accelerator config: batch={self.batch} is not a power of two")
        if self.d_ff % self.chunks:
            raise ConfigError(f"accelerator config: d_ff={self.d_ff} is not a multiple of "
                              f"chunks={self.chunks}")
        f = self.d_ff // self.chunks
        for name, n, m in (("d_model", self.d_model, self.tas_lanes),
                           ("d_model", self.d_model, self.mv_in), ("d_model", self.d_model, self.mv_out),
                           ("d_ff / chunks", f, self.mv_in), ("d_ff / chunks", f, self.mv_out)):
            if n % m:
                raise ConfigError(f"accelerator config: {name}={n} is not a multiple of {m}")
        # What the cores' schedule needs (hw/accel/mv_core.py): a GU run of d_model / mv_in cycles
        # serialises mv_out sums into one requantiser lane, and a D pass writes each accumulator
        # block before it reads it again (ACC_WRITE_DISTANCE).
        if self.d_model // self.mv_in < self.mv_out:
            raise ConfigError(f"accelerator config: d_model / mv_in = {self.d_model // self.mv_in} is below "
                              f"mv_out={self.mv_out} (a GU run must be as long as the outputs its one "
                              f"requantiser lane serialises)")
        d_pass = (f // self.mv_in) * (self.d_model // self.mv_out)
        if d_pass < ACC_WRITE_DISTANCE:
            raise ConfigError(f"accelerator config: a D pass of (d_ff / chunks / mv_in) x (d_model / mv_out)"
                              f" = {d_pass} cycles is below {ACC_WRITE_DISTANCE} (an accumulator block is "
                              f"read again before its write lands)")
        try:
            quant.check_accumulator(self.d_ff, what="d_ff")
        except ValueError as e:
            raise ConfigError(f"accelerator config: {e}") from None

    @property
    def chunk_width(self) -> int:
        return self.d_ff // self.chunks

    @property
    def mac_units(self) -> int:
        """MAC units: one ``mv_in x mv_out`` matrix-vector unit per core."""
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
        """Weight blocks of every layer and chunk: the depth of the weight store."""
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

#: The second geometry the RTL is checked on (``golden/corners-small``): other sizes everywhere
#: (d 16, d_ff 48, 4 x 4 matrix-vector units) and an odd number of chunks per row. With an even
#: number of chunks and two cores, DRS and chunk round-robin put a row's chunks alternately on the
#: cores, one cycle apart, so the cores never finish chunks of one row in the same cycle; with 3
#: chunks they can, and the output stage must count both (docs/verification.md).
SMALL_ACCEL = AccelConfig(d_model=16, d_ff=48, layers=4, tokens_per_frame=4, batch=4, cores=2, chunks=3,
                          tas_lanes=4, mv_in=4, mv_out=4)


def trace_accel(manifest: dict) -> AccelConfig:
    """The accelerator a decode trace was built for: its manifest's ``accel`` field (the corner
    traces), else :data:`DEFAULT_ACCEL` (a model trace is cut for the default accelerator)."""
    if manifest.get("accel") is None:
        return DEFAULT_ACCEL
    cfg = AccelConfig.from_dict(manifest["accel"], source="trace manifest field 'accel'")
    dims = manifest.get("dims") or {}
    for k in ("layers", "batch", "d_model", "d_ff"):
        if k in dims and dims[k] != getattr(cfg, k):
            raise ConfigError(f"trace manifest field 'accel': {k}={getattr(cfg, k)}, but the trace's dims "
                              f"have {k}={dims[k]}")
    return cfg
