"""Every HTTP answer the agent reads goes through ``adapters/httpio.read_capped`` (a size cap and
an overall deadline): no other module calls an httpx client's request methods itself."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "monky_deployd"
METHODS = {"get", "post", "put", "patch", "delete", "head", "options", "request", "stream", "send"}
ALLOWED = {"adapters/httpio.py"}


def client_calls(tree: ast.AST) -> list[int]:
    """Lines calling ``<something named like an httpx client>.<request method>(...)``."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in METHODS:
            continue
        owner = ast.unparse(node.func.value).lower()
        if "client" in owner or "http" in owner:
            lines.append(node.lineno)
    return lines


def test_only_httpio_reads_http_answers() -> None:
    offenders = {
        f"{path.relative_to(SRC)}:{line}"
        for path in SRC.rglob("*.py")
        if str(path.relative_to(SRC)) not in ALLOWED
        for line in client_calls(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert offenders == set(), "read HTTP answers with httpio.read_capped"


def test_the_check_sees_a_direct_call() -> None:
    assert client_calls(ast.parse("self._http.request('GET', url)\nclient.get(u)\n")) == [1, 2]
