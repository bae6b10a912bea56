"""The folder layout is the architecture; this test holds the code to it.

    core      pure: models, planning, rendering, validation, the error catalogue. No I/O, no clock.
    config    config.yaml's model and loader (core only).
    adapters  the network (adapters/net) and the box (adapters/box), plus helpers both share
              (adapters/*.py). net and box never import each other.
    agent     composes the adapters: the token keeper, the tick, the step executors, logging.
    cli       the command line, on top (cli.py and its parser, cliargs.py).

A module may import its own layer and the layers below it; every import is read from the source
(function-local ones too), so a lazy import cannot hide a wrong-way edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "monky_deployd"

# layer -> the layers it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "root": set(),
    "core": {"root"},
    "config": {"root", "core"},
    "adapters": {"root", "core", "config"},
    "adapters.net": {"root", "core", "config", "adapters"},
    "adapters.box": {"root", "core", "config", "adapters"},
    "agent": {"root", "core", "config", "adapters", "adapters.net", "adapters.box"},
    "cli": {"root", "core", "config", "adapters", "adapters.net", "adapters.box", "agent"},
}

# What the pure core must not touch: the OS, the network, processes, the clock, logging.
CORE_FORBIDDEN = {
    "os", "sys", "io", "subprocess", "socket", "ssl", "select", "fcntl", "shutil", "tempfile",
    "pathlib", "threading", "time", "logging", "grp", "pwd", "stat", "urllib", "http",
    "httpx", "httpcore", "hvac", "requests", "openziti",
}  # fmt: skip


def layer_of(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == PKG, module
    if len(parts) == 1 or parts[1] == "__init__":
        return "root"
    if parts[1] == "adapters":
        if len(parts) > 2 and parts[2] in ("net", "box"):
            return f"adapters.{parts[2]}"
        return "adapters"
    if parts[1] in ("core", "config", "agent", "cli"):
        return parts[1]
    if parts[1] == "config_policy":  # config.yaml's policy: model, in its own module
        return "config"
    if parts[1] == "cliargs":  # cli.py's parser and help texts
        return "cli"
    raise AssertionError(f"{module}: not in any layer (add it to a subpackage)")


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted((SRC / PKG).rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def imports(module: str, path: Path) -> set[str]:
    """Every module ``path`` imports, resolved to absolute names."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from pkg import submodule` imports the submodule
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (SRC / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    SRC / Path(*candidate.split(".")) / "__init__.py"
                ).exists():
                    found.add(candidate)
    return found


MODULES = modules()


def test_every_module_is_in_a_layer() -> None:
    for module, _ in MODULES:
        layer_of(module)


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_run_down_the_layers(module: str, path: Path) -> None:
    mine = layer_of(module)
    wrong = []
    for target in sorted(imports(module, path)):
        top = target.split(".")[0]
        if top == "monky_deployd_testkit":
            wrong.append(f"{target} (the test kit is never imported by the agent)")
        if top != PKG:
            if mine == "core" and top in CORE_FORBIDDEN:
                wrong.append(f"{target} (the core is pure: no I/O, no clock, no logging)")
            continue
        theirs = layer_of(target)
        if theirs != mine and theirs not in ALLOWED[mine]:
            wrong.append(f"{target} ({mine} -> {theirs})")
    assert not wrong, f"{module} imports against the layering: " + "; ".join(wrong)


def test_the_checker_sees_a_wrong_way_edge(tmp_path: Path) -> None:
    """The walker resolves relative and function-local imports (a checker that sees nothing
    would pass everything)."""
    fake = tmp_path / "monky_deployd" / "core" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from ..adapters.box import runner\n    import os\n")
    found = imports("monky_deployd.core.x", fake)
    assert "monky_deployd.adapters.box" in found
    assert "os" in found
    assert layer_of("monky_deployd.adapters.box") not in ALLOWED["core"]
