"""The rooms of src/monky_deployd (issue 41): no import circle anywhere (imports inside functions
and under ``TYPE_CHECKING`` count), no folder over 15 modules, no module over 450 lines, each
package's ``__init__`` docstring saying its concern and what it may import, and the rooms of a
package importing one another one way only (``ORDER``: a room may import the package's own
modules and the rooms before it; a package's own modules import none of its rooms)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.repo.test_agent_cycles import _circles
from tests.repo.test_layers import MODULES, PKG, SRC, imports

# package -> its rooms (subpackages), in the order they may import one another
ORDER: dict[str, list[str]] = {
    "core": ["render", "wire", "records", "lifecycle", "signing", "admission", "commands"],
    "agent": ["observe", "apply", "tick", "commands"],
    "adapters.box": ["state", "docker"],
}
MAX_MODULES = 15
MAX_LINES = 450
NAMES = {m for m, _ in MODULES}


def _graph() -> dict[str, set[str]]:
    return {m: {t for t in imports(m, p) if t in NAMES and t != m} for m, p in MODULES}


def test_no_import_circle_anywhere() -> None:
    graph = _graph()
    assert len(graph) > 140  # the walk saw the package
    assert [sorted(c) for c in _circles(graph)] == []


def test_the_circle_finder_counts_function_and_type_checking_imports(tmp_path: Path) -> None:
    fake = tmp_path / "monky_deployd" / "core" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from monky_deployd.core import errors\n"
        "def f():\n    from monky_deployd.core.render import mask\n"
    )
    found = imports("monky_deployd.core.x", fake)
    assert {"monky_deployd.core.errors", "monky_deployd.core.render.mask"} <= found


def test_no_folder_holds_more_than_15_modules() -> None:
    big = {}
    for folder in sorted({p.parent for p in (SRC / PKG).rglob("*.py")}):
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        if count > MAX_MODULES:
            big[str(folder.relative_to(SRC))] = count
    assert big == {}


def test_no_module_is_over_450_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for _, p in MODULES
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


@pytest.mark.parametrize(
    "path",
    sorted((SRC / PKG).rglob("__init__.py"))[1:],  # (the root's: __version__, its own docstring)
    ids=lambda p: str(p.parent.relative_to(SRC)),
)
def test_each_package_says_its_concern_and_what_it_may_import(path: Path) -> None:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert len(doc.split()) >= 8, f"{path}: a docstring saying the package's concern"
    assert "import" in doc, f"{path}: the docstring says what the package may import"


def _room(module: str, package: str) -> str | None:
    """``module``'s room in ``package`` ("" for the package's own modules), None outside it."""
    prefix = f"{PKG}.{package}."
    if not module.startswith(prefix):
        return None
    rest = module[len(prefix) :].split(".")
    return rest[0] if len(rest) > 1 and rest[0] in ORDER[package] else ""


@pytest.mark.parametrize("package", sorted(ORDER))
def test_rooms_import_one_way(package: str) -> None:
    rank = {"": -1} | {room: i for i, room in enumerate(ORDER[package])}
    wrong = []
    for module, targets in sorted(_graph().items()):
        mine = _room(module, package)
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = _room(target, package)
            if theirs is None or theirs == mine:
                continue
            if rank[theirs] > rank[mine]:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_every_room_is_declared() -> None:
    for package, rooms in ORDER.items():
        folder = SRC / PKG / Path(*package.split("."))
        found = sorted(p.parent.name for p in folder.glob("*/__init__.py"))
        assert found == sorted(rooms), package
