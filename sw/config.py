"""The one configuration that drives software, golden model, gateware and testbenches.

Everything that has a size lives here: the model's MLP sizes, the accelerator's geometry (cores,
chunks, matrix-vector unit, TAS lanes) and, through :mod:`sw.spec.quant`, the widths of the
quantisation arithmetic. ``hw/`` builds gateware from an :class:`AccelConfig`, ``tb/`` reads the same
object to size its bus models, and the host refuses a trace made for other sizes with a clear
message instead of a wrong answer.

Changing the array size means changing :data:`DEFAULT_ACCEL` (or passing another
:class:`AccelConfig`, e.g. ``nox -s synth -- --accel A.json``), nothing else.

A cocotb testbench run is configured by one :class:`BenchConfig`: its runner writes it to a JSON file
and names that file in the simulator's environment (:data:`BENCH_CONFIG_ENV`); the testbench reads it
back with :meth:`BenchConfig.from_env`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path

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


#: The environment variable that names a testbench run's :class:`BenchConfig` file (JSON), which
#: ``tb.runner.run_cocotb`` writes into the run's build directory.
BENCH_CONFIG_ENV = "BENCH_CONFIG"


@dataclass(frozen=True)
class BenchConfig:
    """Everything a cocotb testbench run is told besides the Verilog it simulates: one value per field,
    each used by the testbenches named in its description (``tb/``); a field no testbench of the run
    reads keeps its default.

    The runners (``tb/accelerator/runner.py``, ``tb/step/runner.py``, the board, block-RAM and
    multiplier drivers) build one from their keyword arguments, ``tb.runner.run_cocotb`` writes it
    (:meth:`to_json`) into the build directory and names the file in :data:`BENCH_CONFIG_ENV`, and the
    testbench reads it once (:meth:`from_env`). Every value is checked when the object is made: a wrong
    type or range raises :class:`ConfigError` naming the field (and the file, when read from one).

    Parameters
    ----------
    trace : str or None
        The trace directory: a decode trace (the accelerator and the board) or a full-step trace (the
        step's blocks). A path-like is stored as its string.
    accel : AccelConfig or None
        The accelerator the simulated Verilog was built for (the accelerator, the board, the step's
        MLP, decoder layer and whole step); must match the build.
    groups : str
        The decode trace's groups (``sw.trace.decode.select_groups``): ``full``, ``first:N``,
        ``first:N:F`` or ``cover:N``.
    seed : int
        Seed of the random idle cycles, backpressure and pauses (and of the primitives' operands).
    stall : float
        Probability of an idle cycle on every input and of backpressure on every output (the step's
        blocks: pauses on every memory channel too), in [0, 1].
    x_stall : float or None
        The accelerator's input ``x`` alone: probability of an idle cycle, in [0, 1]; ``None``: the
        same as ``stall``. Near 1 the rows arrive far slower than the engine computes.
    modes : tuple of str
        The accelerator's runs, one after the other in one simulator: ``drs``, ``chunk_rr``,
        ``static``, ``dense`` (tau = +inf, no replay) or ``mixed`` (a random schedule per group).
    resets : int
        The accelerator's ``reset_mid_frame``: resets, each followed by the whole selection.
    report : str or None
        The accelerator's JSON report of what it measured (cycles, counters, coverage); none if None.
    cycles : int
        The accelerator's ``raw_model``: cycles the model runs alone.
    log_every : int
        The accelerator: a progress line every this many groups.
    steps : str
        The full-step trace's steps a step testbench runs: ``all``, ``stride:N`` (every N-th, the last
        included), ``first:N`` or ``from:A:N`` (which of them each block takes: its testbench's
        docstring).
    plant : str
        One expected value changed, so the check must fail and name it; the spelling is the
        testbench's (its docstring), empty for none.
    block : str or None
        Which build of a shared testbench: ``qk_score`` or ``attention_head``
        (``cocotb_attention``), ``qkv`` or ``o_head`` (``cocotb_projection``).
    mv : tuple of int or None
        ``(n_in, n_out)``: the matrix-vector unit of the step's projections, QKV, attention layer and
        token head builds.
    max_positions : int or None
        The KV cache's positions of the attention-layer and decoder-layer builds.
    stride : int
        The token head: every this many samples (1: all of them, back to back).
    taps : bool
        The whole step: the build has the ``r`` and ``z`` taps, which are checked.
    video : bool
        The whole step: after the prompt, each step's tokens are the RTL's own (fed back on chip).
    preload : bool
        The whole step: a run from a later step starts with the replay cache written from the trace.
    sdram : float
        The whole step: bytes a cycle the memory moves on its read and write channels (the SDRAM's
        bandwidth); 0: a data beat every cycle.
    out : str or None
        The whole step: the JSON file of the RTL's record (steps, tokens, cycles, bytes); none if None.
    burst, count_bits : int or None
        The AXI4 reader's and writer's builds: the longest burst and the width of a command's word
        count.
    cpb, timeout : int or None
        The board: clock cycles per UART bit and the bridge's timeout in cycles (must match the build).
    bram : tuple of (int, int)
        The block-RAM pairs of the ``tb/bram`` builds, ``(width, depth)`` each, in port order.
    """

    trace: str | None = None
    accel: AccelConfig | None = None
    groups: str = "full"
    seed: int = 1
    stall: float = 0.0
    x_stall: float | None = None
    modes: tuple[str, ...] = ("drs",)
    resets: int = 3
    report: str | None = None
    cycles: int = 200_000
    log_every: int = 256
    steps: str = "all"
    plant: str = ""
    block: str | None = None
    mv: tuple[int, int] | None = None
    max_positions: int | None = None
    stride: int = 1
    taps: bool = True
    video: bool = False
    preload: bool = False
    sdram: float = 0.0
    out: str | None = None
    burst: int | None = None
    count_bits: int | None = None
    cpb: int | None = None
    timeout: int | None = None
    bram: tuple[tuple[int, int], ...] = ()

    #: Fields that hold a file or directory: a path-like is stored as its string.
    PATHS: typing.ClassVar[frozenset[str]] = frozenset({"trace", "report", "out"})
    #: Fields that are probabilities, in [0, 1].
    PROBABILITIES: typing.ClassVar[frozenset[str]] = frozenset({"stall", "x_stall"})
    #: Integer fields that must be at least 1 (when given).
    POSITIVE: typing.ClassVar[frozenset[str]] = frozenset(
        {"cycles", "log_every", "max_positions", "stride", "burst", "count_bits", "cpb", "timeout"})

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in self.PATHS and isinstance(v, os.PathLike):
                v = os.fspath(v)
            v = _typed(v, hints[f.name], f.name)
            object.__setattr__(self, f.name, v)
        for name in self.PROBABILITIES:
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ConfigError(f"bench config field '{name}' must be a probability in [0, 1], not {v!r}")
        for name in self.POSITIVE:
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"bench config field '{name}' must be at least 1, not {v!r}")
        if self.resets < 0:
            raise ConfigError(f"bench config field 'resets' must be at least 0, not {self.resets!r}")
        if self.sdram < 0:
            raise ConfigError(f"bench config field 'sdram' must be at least 0, not {self.sdram!r}")
        if not self.modes or not all(self.modes):
            raise ConfigError(f"bench config field 'modes' must name at least one run, "
                              f"not {list(self.modes)!r}")
        for name, pairs in (("mv", [self.mv] if self.mv else []), ("bram", self.bram)):
            for pair in pairs:
                if min(pair) < 1:
                    raise ConfigError(f"bench config field '{name}' must hold positive sizes, "
                                      f"not {list(pair)!r}")

    def require(self, name: str):
        """The value of field ``name``; :class:`ConfigError` naming the field when it is ``None`` (a
        testbench that needs it was run without it)."""
        v = getattr(self, name)
        if v is None:
            raise ConfigError(f"bench config field '{name}' is not set, and this testbench needs it")
        return v

    def to_dict(self) -> dict:
        """The fields as JSON values: tuples as lists, ``accel`` as its dict."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.to_dict() if isinstance(v, AccelConfig) else _json_value(v)
        return out

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "bench config") -> BenchConfig:
        """The config of a JSON object; one :class:`ConfigError` naming ``source`` and the field for an
        unknown field or a wrong value."""
        return _from_dict(cls, d, source, "bench config")

    def to_json(self, path) -> Path:
        """Write the config to ``path`` (whole or not at all: a reader never sees half a file)."""
        from sw.atomic import atomic_file

        path = Path(path)
        with atomic_file(path) as tmp:
            Path(tmp).write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_json(cls, path) -> BenchConfig:
        """The config in the JSON file ``path``; one :class:`ConfigError` naming the file (and the
        field) when it is missing, not JSON, or holds an unknown field or a wrong value."""
        return cls.from_dict(read_json(path, ConfigError, "bench config"), source=str(path))

    @classmethod
    def from_env(cls, environ=None) -> BenchConfig:
        """The config in the file that :data:`BENCH_CONFIG_ENV` names in ``environ`` (default: this
        process's environment, which the simulator inherits from ``tb.runner.run_cocotb``)."""
        environ = os.environ if environ is None else environ
        path = environ.get(BENCH_CONFIG_ENV)
        if not path:
            raise ConfigError(f"{BENCH_CONFIG_ENV} is not set: it names the testbench's configuration file "
                              "(tb.runner.run_cocotb writes one for every run)")
        return cls.from_json(path)


def _describe(hint) -> str:
    """``hint`` in words, for error messages."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of ({_describe(args[0])})"
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            AccelConfig: "an accelerator config (an object)"}.get(hint, getattr(hint, "__name__", str(hint)))


def _typed(v, hint, name: str):
    """``v`` as the type ``hint`` of bench config field ``name`` (lists become tuples, integers of a
    float field floats, a dict of an :class:`AccelConfig` field the config), or :class:`ConfigError`
    naming the field."""
    def bad():
        return ConfigError(f"bench config field '{name}' must be {_describe(hint)}, not {v!r}")

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        alternatives = [a for a in args if a is not type(None)]
        if len(alternatives) == 1:
            try:
                return _typed(v, alternatives[0], name)
            except ConfigError as e:
                # An accelerator config's own message names what is wrong inside it.
                raise (e if isinstance(v, dict) else bad()) from None
        for a in alternatives:
            try:
                return _typed(v, a, name)
            except ConfigError:
                pass
        raise bad()
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            raise bad()
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(v)
        if len(v) != len(args):
            raise bad()
        try:
            return tuple(_typed(x, a, name) for x, a in zip(v, args, strict=True))
        except ConfigError:
            raise bad() from None
    if hint is bool:
        if isinstance(v, bool):
            return v
    elif hint is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif hint is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    elif hint is str:
        if isinstance(v, str):
            return v
    elif hint is AccelConfig:
        if isinstance(v, AccelConfig):
            return v
        if isinstance(v, dict):
            return AccelConfig.from_dict(v, source=f"bench config field '{name}'")
    raise bad()


def _json_value(v):
    """Tuples (nested too) as lists."""
    return [_json_value(x) for x in v] if isinstance(v, tuple) else v
