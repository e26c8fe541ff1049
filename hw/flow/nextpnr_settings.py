"""Settings for nextpnr that its command line does not reach, written into its input netlist.

nextpnr reads a ``settings`` object on the top module of its JSON input into its context (the
same place where its own options land, for example ``router`` for ``--router``), and its
algorithms read their tunables from there: router2's congestion weights
(``router2/histCongWeight`` and the others), ``router1/maxIterCnt``. YoWASP's nextpnr has no
Python for ``--pre-route`` scripts, so they go into the netlist Yosys wrote, before nextpnr reads
it. This is how router2's weights were measured on the board top (``docs/timing.md``, "What does
not shorten the route"); the build flow itself sets none.

Usage::

    python -m hw.flow.nextpnr_settings top.json router=router2 router2/histCongWeight=2.0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

__all__ = ["SettingsError", "add_settings", "main"]


class SettingsError(Exception):
    """A netlist or a setting that cannot be used; the message names the file and the field."""


def _value(key, value):
    """A setting as nextpnr's JSON frontend keeps it: a string. A string of only 0/1/x/z would be
    read as a bit vector, so numbers are written with a decimal point ("2.0", not "2")."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SettingsError(f"setting {key!r}: {value!r} is not a number or a string")
    if isinstance(value, (int, float)):
        return repr(float(value))
    if value and set(value) <= set("01xz"):
        raise SettingsError(f"setting {key!r}: {value!r} would be read as a bit vector; "
                            f"write a number with a decimal point")
    return value


def add_settings(path, settings):
    """Add ``settings`` (name -> number or string) to the top module of the nextpnr input ``path``,
    in place (written to a temporary file beside it, then renamed). Returns the settings written."""
    path = Path(path)
    values = {str(k): _value(k, v) for k, v in settings.items()}
    try:
        text = path.read_text()
    except OSError as e:
        raise SettingsError(f"{path}: cannot read: {e.strerror}") from None
    try:
        netlist = json.loads(text)
    except json.JSONDecodeError as e:
        raise SettingsError(f"{path}: not JSON: {e}") from None
    modules = netlist.get("modules") if isinstance(netlist, dict) else None
    if not isinstance(modules, dict):
        raise SettingsError(f"{path}: field 'modules': missing (not a Yosys JSON netlist)")
    tops = [name for name, m in modules.items()
            if isinstance(m, dict) and str(m.get("attributes", {}).get("top", "0")).strip("0") != ""]
    if len(tops) != 1:
        raise SettingsError(f"{path}: field 'modules.*.attributes.top': {len(tops)} top modules "
                            f"({', '.join(tops) or 'none'}), expected one")
    module = modules[tops[0]]
    if not isinstance(module.get("settings", {}), dict):
        raise SettingsError(f"{path}: field 'modules.{tops[0]}.settings': not an object")
    module.setdefault("settings", {}).update(values)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(netlist, f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return values


def _parse_pair(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    try:
        return key, float(value) if any(c in value for c in ".eE") or value.isdigit() else value
    except ValueError:
        return key, value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hw.flow.nextpnr_settings",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("netlist", help="nextpnr's JSON input (Yosys write_json), changed in place")
    parser.add_argument("settings", nargs="+", type=_parse_pair, metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    try:
        written = add_settings(args.netlist, dict(args.settings))
    except SettingsError as e:
        print(f"hw.flow.nextpnr_settings: error: {e}", file=sys.stderr)
        return 1
    print(f"{args.netlist}: " + " ".join(f"{k}={v}" for k, v in written.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
