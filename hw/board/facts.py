"""The board's facts file (``constraints/ulx3s_85f.toml``): device, package, clock, pins, UART, the
build's names. Read by the board top, the host program and the synthesis flow."""

import tomllib
from pathlib import Path

DEFAULT_BOARD_FILE = Path(__file__).resolve().parents[2] / "constraints" / "ulx3s_85f.toml"

#: Fields every board file must have (dotted: a table's key).
REQUIRED = ("board", "platform", "device", "package", "speed_grade", "target_mhz", "clock.resource",
            "clock.frequency_mhz", "leds.resource", "leds.count", "build.dir", "build.name")


class BoardFileError(Exception):
    """A board file that cannot be read or lacks a field (the message names both)."""


def load_board(path=DEFAULT_BOARD_FILE) -> dict:
    """Read the board/device facts TOML and return it as a dict (``_path``: where it came from)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            board = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise BoardFileError(f"{path}: cannot read board file: {e}") from None
    for key in REQUIRED:
        node = board
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise BoardFileError(f"{path}: missing field '{key}'")
            node = node[part]
    board["_path"] = str(path)
    return board
