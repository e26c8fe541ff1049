"""The host side of the board (``hw/board/run.py``) against a fake serial port that plays a perfect
board by the protocol of ``docs/board.md``: the whole check passes; a changed output byte, a
changed replay bit, a short answer, a status flag, a trace made for another geometry and a port
that is not a board each give one clear error; the command line fails in one line."""

import numpy as np
import pytest

from hw.accel.accelerator import out_user_layout
from hw.board.core import info_bytes, link_format
from hw.board.host import group_beats
from hw.board.run import BoardError, BoardLink, BoardMismatch, main, run_trace, select_groups
from hw.board.uart_bridge import RESPONSE, Status
from sw.trace.decode import load_decode_trace
from tb.board.small_trace import SMALL_ACCEL, write_small_trace

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_board_host")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return load_decode_trace(write_small_trace(tmp_path_factory.mktemp("host") / "trace"))


class FakeBoard:
    """A serial port with a perfect board behind it: it recognises each group's rows by their bytes
    and answers the trace's outputs. ``corrupt`` changes one output, ``flag`` puts a status bit on
    the answers to one opcode, ``mute_after`` stops answering after that many commands."""

    def __init__(self, cfg, tr, *, corrupt=None, flag=None, mute_after=None, info=None):
        self.cfg, self.tr, self.fmt = cfg, tr, link_format(cfg)
        self.info = info_bytes(cfg) if info is None else info
        self.corrupt, self.flag, self.mute_after = corrupt, flag, mute_after
        nb = self.fmt.x.write_bytes
        self.groups = {group_beats(cfg, tr, g, nb): g for g in range(len(tr.group_layer))}
        self.inbox, self.outbox = bytearray(), bytearray()
        self.pending, self.words, self.commands, self.flushes = [], [], 0, 0
        self.counters = dict.fromkeys(self.fmt.counters, 0)

    def write(self, data):
        self.inbox += data
        while self._step():
            pass
        return len(data)

    def flush(self):
        self.flushes += 1

    def read(self, n):
        out, self.outbox = bytes(self.outbox[:n]), self.outbox[n:]
        return out

    def _answer(self, op, body=b""):
        self.commands += 1
        if self.mute_after is not None and self.commands > self.mute_after:
            return
        status = self.flag[1] if self.flag and self.flag[0] == op else 0
        self.outbox += bytes([op | RESPONSE]) + body + bytes([status])

    def _step(self):
        if len(self.inbox) < 3:
            return False
        op, n = self.inbox[0], int.from_bytes(self.inbox[1:3], "little")
        ops, fmt = self.fmt.opcodes, self.fmt
        size = {ops["cfg"]: n * fmt.cfg.write_bytes, ops["x"]: n * fmt.x.write_bytes}.get(op, 0)
        if len(self.inbox) < 3 + size:
            return False
        payload, self.inbox = bytes(self.inbox[3:3 + size]), self.inbox[3 + size:]
        if op == ops["info"]:
            self._answer(op, bytes([len(self.info)]) + self.info)
        elif op == ops["reset"]:
            self.counters = dict.fromkeys(self.counters, 0)
            self._answer(op)
        elif op == ops["cfg"]:
            nb = fmt.cfg.write_bytes
            self.words += [int.from_bytes(payload[k:k + nb], "little") for k in range(0, size, nb)]
            self._answer(op)
        elif op == ops["x"]:
            g = self.groups[payload]
            B = self.cfg.batch
            for b in range(B):
                self.pending.append((g, b))
            self.counters["groups"] += 1
            self.counters["rows_replayed"] += int(self.tr.replay[g].sum())
            self.counters["rows_computed"] += B - int(self.tr.replay[g].sum())
            self._answer(op)
        elif op == ops["y"]:
            body = b""
            user = out_user_layout(self.cfg)
            for _ in range(n):
                g, b = self.pending.pop(0)
                y = self.tr.y[g, b].copy()
                replay = int(self.tr.replay[g, b])
                if self.corrupt and self.corrupt[:2] == (g, b):
                    what, value = self.corrupt[2:]
                    if what == "element":
                        y[value] ^= 0x20
                    else:
                        replay ^= 1
                u = user.const({"replay": replay, "row": b, "tas": int(self.tr.tas[g, b])}).as_value().value
                tail = u | (int(b == self.cfg.batch - 1) << fmt.y.user_bits)
                body += y.tobytes() + tail.to_bytes(fmt.y.tail_bytes, "little")
            self._answer(op, body)
        elif op == ops["status"]:
            word = sum(self.counters[name] << (k * fmt.counter_bits) for k, name in enumerate(fmt.counters))
            self._answer(op, word.to_bytes(fmt.status_bytes, "little"))
        else:
            self._answer(op)
        return True


def test_whole_trace_on_a_fake_board(trace):
    board = FakeBoard(SMALL_ACCEL, trace)
    groups = select_groups(trace, "full")
    res = run_trace(BoardLink(board), trace, groups)
    B = SMALL_ACCEL.batch
    assert res["groups"] == len(groups) == 12
    assert res["rows_sent"] == res["rows_received"] == 12 * B
    assert res["rows_replayed"] == int(trace.replay.sum()) == res["counters"]["rows_replayed"]
    assert board.pending == [] and board.inbox == b"" and board.outbox == b""
    assert len(board.words) > 100 and board.flushes > 12


def test_first_positions_only(trace):
    groups = select_groups(trace, "first:1")
    assert groups and all(trace.group_index[g] == 0 for g in groups)
    assert run_trace(BoardLink(FakeBoard(SMALL_ACCEL, trace)), trace, groups)["groups"] == len(groups)


@pytest.mark.parametrize("spec", ["first", "first:0", "last:3", "all"])
def test_bad_group_spec(trace, spec):
    with pytest.raises(BoardError, match="expected 'full', 'first:N', 'first:N:F' or 'cover:N'"):
        select_groups(trace, spec)


def test_changed_output_is_named(trace):
    g = 9
    board = FakeBoard(SMALL_ACCEL, trace, corrupt=(g, 1, "element", 6))
    with pytest.raises(BoardMismatch) as err:
        run_trace(BoardLink(board), trace, select_groups(trace, "full"))
    want = (f"group {g} (layer {trace.group_layer[g]}, frame {trace.group_frame[g]}, "
            f"position {trace.group_index[g]}), row 1, element 6: board ")
    assert str(err.value).startswith(want), str(err.value)
    assert "\n" not in str(err.value)


def test_changed_replay_bit_is_named(trace):
    board = FakeBoard(SMALL_ACCEL, trace, corrupt=(5, 0, "replay", None))
    with pytest.raises(BoardMismatch, match=r"group 5 \(.*\), row 0: replay bit"):
        run_trace(BoardLink(board), trace, select_groups(trace, "full"))


def test_short_answer(trace):
    board = FakeBoard(SMALL_ACCEL, trace, mute_after=4)
    with pytest.raises(BoardError, match=r"y of group 0: the board sent 0 of 1 bytes"):
        run_trace(BoardLink(board), trace, select_groups(trace, "full"))


def test_status_flag(trace):
    fmt = link_format(SMALL_ACCEL)
    board = FakeBoard(SMALL_ACCEL, trace, flag=(fmt.opcodes["x"], Status.OVERRUN))
    with pytest.raises(BoardError, match="x of group 0: the board reports OVERRUN"):
        run_trace(BoardLink(board), trace, select_groups(trace, "full"))


def test_trace_for_another_geometry(trace):
    from dataclasses import replace

    other = replace(SMALL_ACCEL, batch=4)
    board = FakeBoard(other, trace)
    board.groups = {}
    with pytest.raises(BoardError, match="the trace has batch = 2, the board was built for 4"):
        run_trace(BoardLink(board), trace, [0])


def test_not_a_board(trace):
    board = FakeBoard(SMALL_ACCEL, trace, info=b"hello world")
    with pytest.raises(BoardError, match="INFO: not a FastCar board"):
        BoardLink(board).connect()


def test_counters_are_checked(trace):
    class Miscounting(FakeBoard):
        def _step(self):
            done = super()._step()
            self.counters["groups"] = min(self.counters["groups"], 3)
            return done

    with pytest.raises(BoardMismatch, match="counted 3 groups, 12 were sent"):
        run_trace(BoardLink(Miscounting(SMALL_ACCEL, trace)), trace, select_groups(trace, "full"))


def test_cli_missing_port_is_one_line(trace, capsys):
    assert main(["--port", "/dev/no-such-serial-port", "--trace", str(trace.path), "--baud", "115200"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hw.board.run: error: ")
    assert "/dev/no-such-serial-port" in err


def test_cli_bad_trace_is_one_line(tmp_path, capsys):
    assert main(["--port", "/dev/null", "--trace", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hw.board.run: error: ") and "nothing" in err


def test_y_beats_decode_like_the_gateware(trace):
    """The fake's encoding of a y beat is the bridge's (Framing), read back by BoardLink.read_y."""
    board = FakeBoard(SMALL_ACCEL, trace)
    link = BoardLink(board)
    link.connect()
    link.write_x(group_beats(SMALL_ACCEL, trace, 4, link.fmt.x.write_bytes))
    rows = link.read_y(SMALL_ACCEL.batch)
    for b, beat in enumerate(rows):
        np.testing.assert_array_equal(beat.y, trace.y[4, b])
        assert (beat.replay, beat.row, beat.last) == (int(trace.replay[4, b]), b, int(b == 1))


@pytest.mark.parametrize("static,chunk_rr", [(False, False), (True, False), (False, True)])
def test_schedule_reaches_the_control_word(trace, static, chunk_rr):
    """``run_trace(static=, chunk_rr=)`` (``--static`` / ``--chunk-rr``) sets the control word's
    scheduling bits, the last configuration word."""
    from hw.accel.accelerator import cfg_layout, ctrl_layout

    board = FakeBoard(SMALL_ACCEL, trace)
    run_trace(BoardLink(board), trace, select_groups(trace, "first:1"), static=static, chunk_rr=chunk_rr)
    lay, data = ctrl_layout(), cfg_layout(SMALL_ACCEL)["data"].offset
    word = board.words[-1]
    assert (word >> (data + lay["static"].offset)) & 1 == static
    assert (word >> (data + lay["chunk_rr"].offset)) & 1 == chunk_rr


def test_static_and_chunk_rr_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["--port", "/dev/null", "--static", "--chunk-rr"])
    assert "not allowed with argument" in capsys.readouterr().err


def info_example(text):
    """The ``board → ...`` bytes of the INFO example in ``docs/board.md``."""
    lines = [ln for ln in text.splitlines() if ln.startswith("board → 80 ")]
    assert len(lines) == 1, f"docs/board.md: expected one 'board → 80 ...' INFO example, found {len(lines)}"
    return bytes(int(b, 16) for b in lines[0].split("→")[1].split())


def test_docs_info_example_is_what_the_board_answers():
    """docs/board.md's INFO exchange: answer byte, length, ``info_bytes`` of the default
    configuration, status 0; a changed byte in the example is caught."""
    from pathlib import Path

    from sw.config import DEFAULT_ACCEL

    text = (Path(__file__).resolve().parents[3] / "docs" / "board.md").read_text()
    info = info_bytes(DEFAULT_ACCEL)
    want = bytes([RESPONSE | 0x00, len(info)]) + info + bytes([0])
    assert info_example(text) == want, "docs/board.md: the INFO example is not what the board answers"
    planted = text.replace(" 46 43 41 52 ", " 46 43 41 53 ", 1)   # FCAR -> FCAS
    assert info_example(planted) != want
