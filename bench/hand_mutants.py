"""The hand-made mutants issue 10 named as survivors, each applied alone to a copy of the tree.

    .venv/bin/python bench/hand_mutants.py

Copies src/ and tests/ into a temporary directory, applies one mutant at a time there (the
working tree is never touched), runs the non-Docker tests that should kill it and prints one line
per mutant: KILLED (with the first failing test) or SURVIVED. Exits 1 when one survives. Needs no
Docker; about a minute. mutmut (bench/mutation.sh) cannot make most of these: they change a number
inside a regular expression, a constant, or remove one clause of a condition.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = "src/monky_deployd/core/"
UNIT = "tests/unit/core"

# (what, file, text, replacement, tests that must kill it)
MUTANTS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "the project-name length bound off by one",
        CORE + "bundle.py",
        '"^[a-z0-9][a-z0-9_-]{0,62}$"',
        '"^[a-z0-9][a-z0-9_-]{0,63}$"',
        UNIT,
    ),
    (
        "NUL accepted in env_template",
        CORE + "bundle.py",
        'elif "\\x00" in template:',
        "elif False:",
        UNIT,
    ),
    (
        'registry_host: "" accepted',
        CORE + "bundle.py",
        "(not isinstance(registry_host, str) or not registry_host)",
        "(not isinstance(registry_host, str))",
        UNIT,
    ),
    (
        "the renew threshold ignoring min_ttl",
        CORE + "token_plan.py",
        "wanted = max(f.renew_below_s, f.min_ttl_s)",
        "wanted = f.renew_below_s",
        UNIT,
    ),
    (
        "single-quoted $ not doubled",
        CORE + "dotenv.py",
        'parts.append((text[last : m.start()].replace("$", "$$"), False))',
        "parts.append((text[last : m.start()], False))",
        UNIT,
    ),
    ("the octal-escape bound", CORE + "dotenv.py", "if code <= 255:", "if code <= 256:", UNIT),
    (
        "the inline-comment split",
        CORE + "dotenv.py",
        '.split(" #", 1)[0]',
        '.split("#", 1)[0]',
        UNIT,
    ),
    (
        "MAX_ENV_STRING_BYTES raised",
        CORE + "envfile.py",
        "MAX_ENV_STRING_BYTES = 131072",
        "MAX_ENV_STRING_BYTES = 131073",
        UNIT,
    ),
    (
        "the tick's one re-acquire on TOKEN_INVALID removed",
        "src/monky_deployd/agent/tick/tick.py",
        "if err.code is not Code.TOKEN_INVALID:\n                raise",
        "raise",
        "tests/integration/agent/test_token_economy.py",
    ),
)


def main() -> int:
    survived = 0
    with tempfile.TemporaryDirectory(prefix="monky-hand-mutants-") as tmp:
        copy = Path(tmp)
        for part in ("src", "tests"):
            shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
        # the copy's src/ first on the path, ahead of the editable install of the working tree
        env = {**os.environ, "PYTHONPATH": str(copy / "src"), "MONKY_HYPOTHESIS": "mutation"}
        for what, rel, old, new, tests in MUTANTS:
            path = copy / rel
            original = path.read_text(encoding="utf-8")
            if original.count(old) != 1:
                print(f"CANNOT   {what}: the text to change is not in {rel} exactly once")
                return 2
            path.write_text(original.replace(old, new), encoding="utf-8")
            try:
                argv = (sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider")
                proc = subprocess.run(
                    (*argv, "-m", "not docker", tests),
                    cwd=copy,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
            finally:
                path.write_text(original, encoding="utf-8")
            failed = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED ")]
            if proc.returncode == 1 and failed:
                print(f"KILLED   {what}: {failed[0].removeprefix('FAILED ')}")
            elif proc.returncode == 0:
                survived += 1
                print(f"SURVIVED {what}")
            else:
                print(f"ERROR    {what}: pytest exit {proc.returncode}\n{proc.stdout[-2000:]}")
                return 2
    print(f"{len(MUTANTS) - survived} of {len(MUTANTS)} killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
