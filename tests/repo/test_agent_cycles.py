"""agent/'s modules import one another one way (issue 29): an import circle, even through an
import inside a function, makes the order matter and hides which module a path really needs
(the no-op tick's). Only imports under ``TYPE_CHECKING`` (never run) do not count. Issue 29
untied the last two: baking/recovery/steps (the bake's start is agent/apply/bakestart.py) and
ledger/metrics (the textfile's name is core.records.ledger's)."""

from __future__ import annotations

import ast
from pathlib import Path

import monky_deployd

AGENT = Path(monky_deployd.__file__).parent / "agent"
PREFIX = "monky_deployd.agent"


def _imports(path: Path) -> set[str]:
    """The agent modules ``path`` imports, at module level or inside a function."""
    tree = ast.parse(path.read_text())
    never = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in never:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX or node.module.startswith(PREFIX + "."):
                rest = node.module[len(PREFIX) + 1 :]
                found.update(f"{rest}.{a.name}".lstrip(".") for a in node.names)
                found.add(rest)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX + "."):
                    found.add(alias.name[len(PREFIX) + 1 :])
    return found


def _graph() -> dict[str, set[str]]:
    """agent/'s modules by their name below agent (``tick.tick``, ``context``) -> what they
    import of agent/ (the rooms are folders: issue 41)."""
    files = {
        ".".join(p.relative_to(AGENT).with_suffix("").parts): p
        for p in AGENT.rglob("*.py")
        if p.name != "__init__.py"
    }
    return {n: {i for i in _imports(p) if i in files} for n, p in files.items()}


def _circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module, or a module importing
    itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.add(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {
        frozenset({"a", "b", "c"})
    }
    assert _circles({"a": {"b"}, "b": set()}) == set()


def test_agent_has_no_import_circle() -> None:
    graph = _graph()
    assert {
        "tick.tick",
        "apply.steps",
        "apply.baking",
        "tick.ledger",
        "tick.metrics",
    } <= graph.keys()  # the walk saw agent/
    assert [sorted(c) for c in _circles(graph)] == []


def test_the_tick_reads_top_to_bottom_within_250_lines() -> None:
    """agent/tick/tick.py is the no-op path's table of contents (issue 29): helpers live beside
    it."""
    assert len((AGENT / "tick" / "tick.py").read_text().splitlines()) <= 250
