"""pytest driver: the board core (UART bridge around a small accelerator) on Verilator, driven through
its UART pins by the host code of ``hw.board.run`` on a small trace; protocol errors; and a planted
mismatch in the trace that must be caught and located."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hw.board.core import BoardCore
from sw.config import BenchConfig
from tb.board.small_trace import SMALL_ACCEL, write_small_trace
from tb.runner import BUILD, CocotbFailure, run_cocotb

HERE = Path(__file__).resolve().parent
#: Clock cycles per UART bit in simulation (12.5 Mbaud at the testbench's 100 MHz).
CPB = 8
#: The bridge's watchdog in cycles: about 50 bytes of silence.
TIMEOUT = 4000


def run(tag: str, testcase=None, cfg=SMALL_ACCEL, **fields):
    """The board core's cocotb tests ``testcase`` on Verilator; ``fields``: further
    :class:`sw.config.BenchConfig` fields (the trace)."""
    key = hashlib.sha1(json.dumps([cfg.to_dict(), CPB, TIMEOUT], sort_keys=True).encode()).hexdigest()[:8]
    bench = BenchConfig(accel=cfg, cpb=CPB, timeout=TIMEOUT, **fields)
    return run_cocotb(lambda: BoardCore(cfg, CPB, timeout=TIMEOUT, hold_bits=4), toplevel="board_core",
                      test_module="cocotb_board", test_dir=HERE,
                      build_dir=BUILD / "board" / f"verilator-{key}", sim="verilator", bench=bench,
                      tag=tag, testcase=testcase, key=[cfg.to_dict(), CPB, TIMEOUT])


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    return write_small_trace(tmp_path_factory.mktemp("board") / "trace")


def test_trace_over_uart(small_trace):
    """Every group of the small trace over the UART, with and without idle gaps from the host:
    every output byte and replay bit, and rows in against rows out."""
    names = ["trace_over_uart/stall=0.0", "trace_over_uart/stall=0.3"]
    assert run("trace", testcase=names, trace=small_trace) == 2


def test_protocol_errors():
    """An unknown opcode and abandoned commands are reported, and the board recovers."""
    assert run("protocol", testcase=["protocol_errors", "info_reports_abandoned_command"]) == 2


def test_planted_mismatch_is_caught(small_trace, tmp_path):
    """One changed byte of a stored output must fail, named by layer, frame, position, row and element."""
    bad = tmp_path / "bad"
    shutil.copytree(small_trace, bad)
    y = np.load(bad / "y.npy")
    g = 7
    y[g, 1, 5] ^= 0x10
    np.save(bad / "y.npy", y)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["tensors"]["y"]["sha256"] = hashlib.sha256((bad / "y.npy").read_bytes()).hexdigest()
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CocotbFailure) as err:
        run("planted", testcase=["trace_over_uart/stall=0.0"], trace=bad)
    layer, frame, index = (int(np.load(bad / f"group_{k}.npy")[g]) for k in ("layer", "frame", "index"))
    want = f"group {g} (layer {layer}, frame {frame}, position {index}), row 1, element 5"
    assert want in str(err.value), str(err.value)
