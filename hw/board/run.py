"""Run a decode trace on the accelerator of a real ULX3S-85F over its USB UART, bit for bit.

Usage::

    python -m hw.board.run --port /dev/ttyUSB0 [--trace golden/fastcar] [--groups first:N | --full]
                       [--baud B] [--static | --chunk-rr] [--timeout S]

The board must run the bitstream of ``nox -s synth`` (:class:`hw.board.top.BoardTop`). The host
asks the board what it was built for (``INFO``), resets the accelerator, loads the trace's weights
and tables (``cfg``), then sends each group's rows (``x``) and reads back its outputs (``y``),
and compares every output byte and replay bit with the trace. The first difference is reported
with its layer, frame, position, row and element; the accelerator's counters are checked at the
end. The byte protocol is in ``docs/board.md``.

:class:`BoardLink` is the protocol over any object with ``read(n)`` and ``write(data)``
(pyserial's ``Serial``, a fake port in the tests, the simulated board in ``tb/board/``);
:func:`run_trace` is the whole check on such a link.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from hw.accel.accelerator import out_user_layout
from hw.board.core import LinkFormat, link_format, parse_info
from hw.board.host import config_words, group_beats, trace_layers, unpack_y
from hw.board.uart_bridge import MAX_COUNT, OP_INFO, OP_RESET, RESPONSE, Status
from sw.config import AccelConfig

__all__ = ["BoardError", "BoardMismatch", "BoardLink", "YBeat", "run_trace", "check_group",
           "select_groups", "main"]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TRACE = REPO / "golden" / "fastcar"


class BoardError(Exception):
    """A failure that is reported as one line: the board did not answer as the protocol says, or
    the trace does not fit the board."""


class BoardMismatch(BoardError):
    """The board computed something other than the trace."""


class YBeat:
    """One output row read from the board: ``y`` (int8 array), ``replay``, ``row``, ``tas`` and ``last``."""

    __slots__ = ("y", "replay", "row", "tas", "last")

    def __init__(self, y, replay, row, last, tas=0):
        self.y, self.replay, self.row, self.last, self.tas = y, replay, row, last, tas

    def __repr__(self):
        return (f"YBeat(replay={self.replay}, row={self.row}, tas={self.tas}, last={self.last}, "
                f"y={self.y.tolist()})")


class BoardLink:
    """The board's byte protocol over ``port``, any object with ``read(n) -> bytes`` (which may
    return fewer bytes when it times out) and ``write(data)``. If the port has ``flush()`` (wait
    until everything written has been sent, as pyserial's), it is called after each command, so
    that the read timeout only covers the board's answer and not the time a long command spends
    on the line.

    Call :meth:`connect` first: it reads what the board was built for, which sizes the beats.

    Parameters
    ----------
    port : object
        The byte link, e.g. a ``serial.Serial``.
    """

    def __init__(self, port):
        self.port = port
        self.config: AccelConfig | None = None
        self.fmt: LinkFormat | None = None

    # --- framing ------------------------------------------------------------------------------
    def _send(self, name: str, n: int = 0, payload: bytes = b""):
        if not 0 <= n <= MAX_COUNT:
            raise ValueError(f"{name}: count {n} outside 0..{MAX_COUNT}")
        op = self.fmt.opcodes[name] if self.fmt else {"info": OP_INFO, "reset": OP_RESET}[name]
        self.port.write(bytes([op]) + n.to_bytes(2, "little") + bytes(payload))
        if hasattr(self.port, "flush"):
            self.port.flush()
        return op

    def _read(self, n: int, what: str) -> bytes:
        data = bytes(self.port.read(n)) if n else b""
        if len(data) != n:
            raise BoardError(f"{what}: the board sent {len(data)} of {n} bytes and then nothing "
                             f"(wrong port or baud rate, no bitstream, or the board is stuck)")
        return data

    def _answer(self, op: int, what: str) -> None:
        (head,) = self._read(1, what)
        if head != op | RESPONSE:
            raise BoardError(f"{what}: the answer begins with {head:#04x}, expected {op | RESPONSE:#04x} "
                             f"(host and board are out of step)")

    def _status(self, what: str, *, ignore: bool = False) -> int:
        (flags,) = self._read(1, what)
        if flags and not ignore:
            names = ", ".join(f.name for f in Status if flags & f) or f"{flags:#04x}"
            raise BoardError(f"{what}: the board reports {names}")
        return flags

    # --- commands -----------------------------------------------------------------------------
    def info(self) -> AccelConfig:
        """The configuration the board's accelerator was built for (``INFO``). Earlier status flags
        (e.g. a command abandoned by a host that stopped) are not errors here."""
        op = self._send("info")
        self._answer(op, "INFO")
        (n,) = self._read(1, "INFO")
        raw = self._read(n, "INFO")
        self._status("INFO", ignore=True)
        try:
            return parse_info(raw)
        except ValueError as e:
            raise BoardError(f"INFO: {e}") from None

    def connect(self) -> AccelConfig:
        """:meth:`info`, and size the beats for that configuration."""
        self.config = self.info()
        self.fmt = link_format(self.config)
        return self.config

    def reset(self) -> None:
        """Reset the accelerator (counters to zero, pipelines empty; weights stay)."""
        op = self._send("reset")
        self._answer(op, "RESET")
        self._status("RESET")

    def write_cfg(self, words: list[int]) -> None:
        """Configuration words (:func:`hw.board.host.config_words`), in commands of at most 65535."""
        nb = self.fmt.cfg.write_bytes
        for start in range(0, len(words), MAX_COUNT):
            part = words[start:start + MAX_COUNT]
            op = self._send("cfg", len(part), b"".join(w.to_bytes(nb, "little") for w in part))
            self._answer(op, f"cfg words {start}..{start + len(part) - 1}")
            self._status(f"cfg words {start}..{start + len(part) - 1}")

    def write_x(self, beats: bytes, what: str = "x") -> None:
        """One packet of rows on ``x`` (``last`` on its final row), as concatenated beats
        (:func:`hw.board.host.group_beats` with ``row_bytes = fmt.x.write_bytes``)."""
        nb = self.fmt.x.write_bytes
        if len(beats) % nb or not beats:
            raise ValueError(f"{what}: {len(beats)} bytes is not a whole number of {nb}-byte rows")
        op = self._send("x", len(beats) // nb, beats)
        self._answer(op, what)
        self._status(what)

    def read_y(self, n: int, what: str = "y") -> list[YBeat]:
        """``n`` output rows."""
        f, d = self.fmt.y, self.config.d_model
        user = out_user_layout(self.config)
        op = self._send("y", n)
        self._answer(op, what)
        raw = self._read(n * f.read_bytes, what)
        self._status(what)
        rows = []
        for k in range(n):
            beat = raw[k * f.read_bytes:(k + 1) * f.read_bytes]
            tail = int.from_bytes(beat[f.data_bytes:], "little")
            u = user.from_bits(tail & ((1 << f.user_bits) - 1))
            rows.append(YBeat(unpack_y(int.from_bytes(beat[:f.data_bytes], "little"), d),
                              int(u.replay), int(u.row), (tail >> f.user_bits) & 1, int(u.tas)))
        return rows

    def counters(self) -> dict[str, int]:
        """The accelerator's counters by name (:func:`hw.board.core.counter_names`)."""
        op = self._send("status")
        self._answer(op, "counters")
        raw = self._read(self.fmt.status_bytes, "counters")
        self._status("counters")
        return self.fmt.unpack_counters(raw)


# --- the check ----------------------------------------------------------------------------------

def select_groups(tr, spec: str) -> list[int]:
    """:func:`sw.trace.decode.select_groups`, with :class:`BoardError` for a bad ``--groups``."""
    from sw.trace.decode import select_groups as select

    try:
        return select(tr, spec)
    except ValueError as e:
        raise BoardError(f"--groups {e}") from None


def where(tr, g: int, b: int) -> str:
    return (f"group {g} (layer {int(tr.group_layer[g])}, frame {int(tr.group_frame[g])}, "
            f"position {int(tr.group_index[g])}), row {b}")


def check_group(tr, g: int, rows: list[YBeat]) -> None:
    """The rows the board gave for group ``g`` against the trace; :class:`BoardMismatch` names the
    first difference."""
    B = tr.dims["batch"]
    for b, beat in enumerate(rows):
        at = where(tr, g, b)
        if beat.row != b:
            raise BoardMismatch(f"{at}: the board gave row {beat.row} in its place")
        if beat.last != (b == B - 1):
            raise BoardMismatch(f"{at}: last = {beat.last}, expected {int(b == B - 1)}")
        if beat.tas != int(tr.tas[g, b]):
            raise BoardMismatch(f"{at}: TAS {beat.tas}, trace {int(tr.tas[g, b])}")
        if beat.replay != int(tr.replay[g, b]):
            raise BoardMismatch(f"{at}: replay bit {beat.replay}, trace {int(tr.replay[g, b])}")
        bad = np.flatnonzero(beat.y != tr.y[g, b])
        if bad.size:
            e = int(bad[0])
            raise BoardMismatch(f"{at}, element {e}: board {int(beat.y[e])}, trace {int(tr.y[g, b][e])}"
                                f" ({bad.size} of {beat.y.size} elements differ)")


def check_fits(cfg: AccelConfig, tr) -> None:
    """:class:`BoardError` if the trace was not made for the accelerator the board was built for."""
    dims = tr.dims
    want = {"d_model": cfg.d_model, "d_ff": cfg.d_ff, "layers": cfg.layers, "batch": cfg.batch}
    for name, value in want.items():
        if dims[name] != value:
            raise BoardError(f"{tr.path}: the trace has {name} = {dims[name]}, the board was built for "
                             f"{value} ({cfg.to_dict()})")
    if dims["n_heads"] * dims["head_dim"] != cfg.d_model:
        raise BoardError(f"{tr.path}: q and k have {dims['n_heads']} x {dims['head_dim']} elements, "
                         f"the board takes {cfg.d_model}")
    if int(np.max(tr.group_index)) >= cfg.tokens_per_frame:
        raise BoardError(f"{tr.path}: positions up to {int(np.max(tr.group_index))}, the board's replay "
                         f"cache holds {cfg.tokens_per_frame} per frame")


def run_trace(link: BoardLink, tr, groups: list[int], *, static: bool = False, chunk_rr: bool = False,
              progress=None) -> dict:
    """Stream ``groups`` of the decode trace ``tr`` through the board on ``link`` and check every
    output against the trace, and the board's counters against what was sent. The schedule is DRS,
    ``static`` (row ``b`` on core ``b mod cores``) or ``chunk_rr`` (chunk ``j`` on core ``j mod cores``).

    Returns ``{"groups", "rows_sent", "rows_received", "rows_replayed", "counters"}``; raises
    :class:`BoardMismatch` at the first difference, :class:`BoardError` on a protocol failure.
    ``progress``, if given, wraps the iteration over the groups (e.g. ``tqdm``).
    """
    cfg = link.connect()
    check_fits(cfg, tr)
    link.reset()
    decode = tr.manifest.get("decode", {})
    link.write_cfg(config_words(cfg, trace_layers(tr), static=static, chunk_rr=chunk_rr,
                                refresh_every=decode.get("refresh_every"), max_chain=decode.get("max_chain")))
    B, nb = tr.dims["batch"], link.fmt.x.write_bytes
    sent = received = 0
    for g in (progress(groups) if progress else groups):
        link.write_x(group_beats(cfg, tr, g, nb), what=f"x of group {g}")
        sent += B
        rows = link.read_y(B, what=f"y of group {g}")
        received += len(rows)
        check_group(tr, g, rows)
    counters = link.counters()
    replayed = int(sum(int(tr.replay[g].sum()) for g in groups))
    if counters["groups"] != len(groups):
        raise BoardMismatch(f"counters: the board counted {counters['groups']} groups, "
                            f"{len(groups)} were sent")
    if counters["rows_replayed"] + counters["rows_computed"] != sent:
        raise BoardMismatch(f"counters: the board decided {counters['rows_replayed']} + "
                            f"{counters['rows_computed']} rows, {sent} were sent")
    if counters["rows_replayed"] != replayed:
        raise BoardMismatch(f"counters: the board replayed {counters['rows_replayed']} rows, the trace "
                            f"{replayed}")
    return {"groups": len(groups), "rows_sent": sent, "rows_received": received,
            "rows_replayed": replayed, "counters": counters}


# --- command line -------------------------------------------------------------------------------

def default_baud() -> int:
    """The baud rate of the board file (``constraints/ulx3s_85f.toml``, ``[uart] baud``)."""
    from hw.board.facts import load_board

    return int(load_board()["uart"]["baud"])


def open_port(port: str, baud: int, timeout: float):
    try:
        import serial
    except ImportError:
        raise BoardError("pyserial is not installed (pip install -e '.[hw]')") from None
    try:
        ser = serial.Serial(port, baud, timeout=timeout)
    except (serial.SerialException, ValueError, OSError) as e:
        raise BoardError(f"--port {port}: cannot open it: {e}") from None
    try:
        ser.set_low_latency_mode(True)      # FTDI adapters otherwise hold bytes for 16 ms
    except (AttributeError, ValueError, OSError):
        pass
    # A host that stopped in the middle of a command leaves the bridge waiting; its watchdog
    # abandons the command after about 50 ms. Wait that out and drop anything stale.
    time.sleep(0.2)
    ser.reset_input_buffer()
    return ser


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hw.board.run", description=__doc__.split("\n")[0])
    ap.add_argument("--port", required=True, help="serial port of the board, e.g. /dev/ttyUSB0")
    ap.add_argument("--trace", default=str(DEFAULT_TRACE),
                    help="decode trace directory (default: %(default)s)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--groups", default="full",
                       help="'full' or 'first:N' (positions < N of every frame and layer; default: full)")
    which.add_argument("--full", action="store_const", const="full", dest="groups",
                       help="the whole trace (same as --groups full)")
    ap.add_argument("--baud", type=int, default=None, help="baud rate (default: the board file's)")
    schedule = ap.add_mutually_exclusive_group()
    schedule.add_argument("--static", action="store_true", help="static core assignment instead of DRS")
    schedule.add_argument("--chunk-rr", action="store_true",
                          help="chunk round-robin (chunk j on core j mod cores) instead of DRS")
    ap.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an answer (default: 2)")
    args = ap.parse_args(argv)
    ser = None
    try:
        from sw.trace.decode import load_decode_trace
        from sw.trace.store import TraceError

        try:
            tr = load_decode_trace(args.trace)
        except TraceError as e:
            raise BoardError(str(e)) from None
        groups = select_groups(tr, args.groups)
        ser = open_port(args.port, args.baud or default_baud(), args.timeout)
        from tqdm import tqdm

        t0 = time.monotonic()
        res = run_trace(BoardLink(ser), tr, groups, static=args.static, chunk_rr=args.chunk_rr,
                        progress=lambda it: tqdm(it, desc="groups", unit="group", file=sys.stderr))
        seconds = time.monotonic() - t0
    except BoardError as e:
        print(f"hw.board.run: error: {e}", file=sys.stderr)
        return 1
    finally:
        if ser is not None:
            ser.close()
    c = res["counters"]
    busy = ", ".join(f"{c[k]}" for k in sorted(c) if k.startswith("core_busy_"))
    print(f"{res['groups']} groups, {res['rows_received']} rows bit-exact on the board "
          f"({res['rows_replayed']} replayed, {c['rows_computed']} computed) in {seconds:.1f} s; "
          f"accelerator: {c['total_cycles']} cycles, core busy {busy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
