"""The testbenches' one configuration (``sw.config.BenchConfig``): it survives its JSON file exactly,
a bad file is refused in one message that names the file and the field, and no ad-hoc environment
variable with the project's old prefix is read or set anywhere in the source."""

import json
import re
import shutil
from pathlib import Path

import pytest

from sw.config import BENCH_CONFIG_ENV, DEFAULT_ACCEL, SMALL_ACCEL, BenchConfig, ConfigError

REPO = Path(__file__).resolve().parents[2]

#: A config with every field away from its default.
FULL = BenchConfig(trace="/traces/t", accel=SMALL_ACCEL, groups="cover:8", seed=30, stall=0.3, x_stall=0.9,
                   modes=("drs", "static", "chunk_rr", "dense"), resets=2, report="/b/cycles.json",
                   cycles=5000, log_every=16, steps="from:40:5", plant="r_out:3:1:2:4", block="qkv",
                   mv=(4, 4), max_positions=128, stride=16, taps=False, video=True, preload=True,
                   sdram=2.8, out="/b/rtl.json", burst=16, count_bits=24, cpb=8, timeout=4000,
                   bram=((18, 1024), (9, 256)))


@pytest.mark.parametrize("cfg", [BenchConfig(), FULL], ids=["defaults", "every-field"])
def test_the_json_file_round_trips_exactly(cfg, tmp_path):
    path = cfg.to_json(tmp_path / "bench.json")
    back = BenchConfig.from_json(path)
    assert back == cfg
    assert back.to_dict() == cfg.to_dict() == json.loads(path.read_text())
    assert BenchConfig.from_env({BENCH_CONFIG_ENV: str(path)}) == cfg


def test_every_field_differs_from_its_default_in_the_full_config():
    """So the round trip above covers every field (a new field must be added to ``FULL``)."""
    same = [k for k, v in BenchConfig().to_dict().items() if FULL.to_dict()[k] == v]
    assert same == []


def test_values_are_normalised_to_their_types():
    cfg = BenchConfig(trace=Path("/t"), accel=DEFAULT_ACCEL.to_dict(), stall=0, modes=["mixed"], mv=[8, 8],
                      bram=[[18, 1024]])
    assert (cfg.trace, cfg.accel, cfg.stall, cfg.modes, cfg.mv, cfg.bram) == \
        ("/t", DEFAULT_ACCEL, 0.0, ("mixed",), (8, 8), ((18, 1024),))
    assert isinstance(cfg.stall, float)


@pytest.mark.parametrize("change, named", [
    ({"stal": 0.2}, r"unknown bench config field\(s\) \['stal'\]"),
    ({"stall": "0.2"}, "field 'stall' must be a number, not '0.2'"),
    ({"seed": 1.5}, "field 'seed' must be an integer, not 1.5"),
    ({"taps": 1}, "field 'taps' must be true or false, not 1"),
    ({"modes": "drs"}, "field 'modes' must be a list of"),
    ({"mv": [8]}, "field 'mv' must be a list of 2"),
    ({"bram": [[18, "1024"]]}, "field 'bram' must be a list of"),
    ({"stall": 1.5}, r"field 'stall' must be a probability in \[0, 1\], not 1.5"),
    ({"stride": 0}, "field 'stride' must be at least 1, not 0"),
    ({"accel": {**DEFAULT_ACCEL.to_dict(), "chunks": 7}},
     "field 'accel': accelerator config: d_ff=256 is not"),
    ({"accel": {"rows": 4}}, r"field 'accel': unknown accelerator config field\(s\) \['rows'\]"),
])
def test_a_bad_file_is_refused_naming_the_file_and_the_field(tmp_path, change, named):
    path = tmp_path / "bench-bad.json"
    path.write_text(json.dumps({**BenchConfig().to_dict(), **change}))
    with pytest.raises(ConfigError, match=f"^{path}: (bench config )?{named}") as e:
        BenchConfig.from_json(path)
    assert "\n" not in str(e.value)


def test_a_file_that_is_not_a_config_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="missing.json: no such bench config file"):
        BenchConfig.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bench.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="bench.json: not valid JSON"):
        BenchConfig.from_json(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="bench.json: expected a JSON object, not list"):
        BenchConfig.from_json(bad)


def test_from_env_names_the_variable_when_it_is_missing():
    with pytest.raises(ConfigError, match=f"{BENCH_CONFIG_ENV} is not set"):
        BenchConfig.from_env({})


def test_require_names_a_missing_field():
    assert BenchConfig(trace="/t").require("trace") == "/t"
    with pytest.raises(ConfigError, match="field 'accel' is not set"):
        BenchConfig().require("accel")


# --------------------------------------------------------------------------------------------------
# No environment variable of the old kind: the testbenches take a BenchConfig, the rest options.

#: The prefix of the environment variables the testbenches used to be configured by (spelled in two
#: parts, so that this file does not name one).
OLD_PREFIX = "FASTCAR" + "_"
#: What is scanned: the code, its tests and sessions, CI and the docs that show how to run them.
SCANNED = ("sw", "hw", "tb", "tests", "conftest.py", "noxfile.py", "pyproject.toml", ".ci", "docs",
           "README.md", "golden/README.md")
#: Files read as text (and files without a suffix, such as CI's scripts).
TEXT = {".py", ".md", ".toml", ".cfg", ".ini", ".txt", ".sh", ".json", ".v", ".yml", ".yaml", ""}


def old_variables(root: Path = REPO) -> list[str]:
    """Every line of the scanned source (:data:`SCANNED`) that names a variable with
    :data:`OLD_PREFIX`, as ``path:line: text``: any read (``os.environ[...]``, ``.get``,
    ``os.getenv``), any setting (an environment dict, ``monkeypatch.setenv``, a shell export) and any
    mention in a docstring or the docs, which would describe a switch that does nothing."""
    pattern = re.compile(re.escape(OLD_PREFIX) + r"\w*")
    found = []
    for name in SCANNED:
        top = root / name
        files = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in files:
            if not path.is_file() or path.suffix not in TEXT or "__pycache__" in path.parts:
                continue
            try:
                lines = path.read_text().splitlines()
            except UnicodeDecodeError:
                continue
            found += [f"{path.relative_to(root)}:{i}: {line.strip()}"
                      for i, line in enumerate(lines, 1) if pattern.search(line)]
    return found


def test_no_environment_variable_of_the_old_kind():
    found = old_variables()
    assert found == [], ("the testbenches are configured by sw.config.BenchConfig (tb/runner.py), the rest "
                         "by options; these still name an old environment variable:\n" + "\n".join(found))


def test_the_scan_catches_a_planted_variable(tmp_path):
    """A planted read in a testbench and a planted setting in the sessions, in a copy of the tree, are
    found by file and line; the copy is clean before."""
    root = tmp_path / "repo"
    for name in ("tb", "tests"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conftest.py", "noxfile.py"):
        shutil.copy(REPO / name, root / name)
    assert old_variables(root) == []
    bench = root / "tb" / "step" / "bench.py"
    text = bench.read_text().splitlines()
    text.append(f'X = os.environ["{OLD_PREFIX}X"]')
    bench.write_text("\n".join(text) + "\n")
    nox = root / "noxfile.py"
    nox.write_text(nox.read_text() + f'\nENV = {{"{OLD_PREFIX}WAVES": "1"}}\n')
    found = old_variables(root)
    assert [f.split(": ", 1)[0] for f in found] == [
        f"tb/step/bench.py:{len(text)}", f"noxfile.py:{len(nox.read_text().splitlines())}"], found


def test_waves_are_asked_for_the_way_cocotb_reads_its_switch():
    from tb.runner import WAVES_ENV, waves_requested

    cases = (("1", True), ("yes", True), ("TRUE", True), ("0", False), ("off", False), ("", False))
    for value, want in cases:
        assert waves_requested({WAVES_ENV: value}) is want, value
    assert waves_requested({}) is False
    with pytest.raises(ValueError, match=f"{WAVES_ENV}='sometimes'"):
        waves_requested({WAVES_ENV: "sometimes"})


def test_verilator_builds_compile_through_ccache_only_when_it_is_there(monkeypatch):
    """``OBJCACHE=ccache`` when ccache is on the path; nothing when it is not, or when the caller's
    MAKEFLAGS chooses OBJCACHE itself."""
    import tb.runner as runner

    monkeypatch.setattr(runner.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert runner.objcache_flags({}) == ["OBJCACHE=ccache"]
    assert runner.objcache_flags({"MAKEFLAGS": "OBJCACHE= -j2"}) == []
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    assert runner.objcache_flags({}) == []
