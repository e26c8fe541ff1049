"""The README's layout table names every package of sw/, hw/ and tb/ (a test a missing one fails),
and the README stays short: one figure a headline cell, the detail in docs/."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_BYTES = 12_000


def packages(root: Path = REPO) -> list[str]:
    """``sw/model/``, ``tb/step/``, ...: every directory of sw/, hw/ and tb/ with an ``__init__.py``."""
    out = []
    for top in ("sw", "hw", "tb"):
        for init in sorted((root / top).rglob("__init__.py")):
            rel = init.parent.relative_to(root).as_posix()
            if rel != top and "build" not in rel.split("/"):
                out.append(rel + "/")
    return out


def layout_rows(text: str) -> dict[str, str]:
    """``{path: contents}`` of the layout table (a row naming several paths gives each the row)."""
    part = text.split("## Layout", 1)[1]
    rows = {}
    for line in part.splitlines():
        m = re.match(r"\| (.+?) \| (.+) \|$", line)
        if m and "`" in m.group(1):
            for path in re.findall(r"`([^`]+)`", m.group(1)):
                rows[path] = m.group(2)
    return rows


def missing_packages(text: str, root: Path = REPO) -> list[str]:
    """Packages the layout table names neither as a row nor, as ``name/``, in their parent's row."""
    rows = layout_rows(text)
    out = []
    for pkg in packages(root):
        parent, name = pkg.rstrip("/").rsplit("/", 1)
        if pkg not in rows and f"`{name}/`" not in rows.get(parent + "/", ""):
            out.append(pkg)
    return out


def test_layout_table_names_every_package():
    assert missing_packages(README.read_text()) == []


def test_a_package_left_out_of_the_table_is_found():
    text = README.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `hw/step/` |"))
    assert missing_packages(text.replace(row + "\n", "")) == ["hw/step/"]


def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size:,} bytes, more than {MAX_BYTES:,}: move detail to docs/"
