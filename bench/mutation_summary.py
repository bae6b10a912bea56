"""Summarise a mutmut run (bench/mutation.sh): killed / survived / timeout per module, survivors.

Reads the ``mutants/src/**/*.py.meta`` files that ``mutmut run`` leaves in the repository root,
prints one line per mutated module and every mutant the tests did not kill with the line it
changed, and exits 1 when a module's score, (killed + timeout) / total, is below ``--min-score``.
Run it from the repository root, with the venv that ran mutmut.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

CAUGHT = ("killed", "timeout", "caught by type check")


def changed_lines(name: str) -> list[str]:
    """The removed and added lines of one mutant (``mutmut show`` without the context)."""
    module = name.split(".x_", 1)[0].split(".xǁ", 1)[0]
    path = Path("src", *module.split(".")).with_suffix(".py")
    diff = get_diff_for_mutant(name, path=path)
    return [
        line[0] + " " + line[1:].strip()
        for line in diff.splitlines()
        if line[:1] in "-+" and not line.startswith(("---", "+++"))
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    parser.add_argument("--min-score", type=float, default=90.0)
    parser.add_argument("--no-diffs", action="store_true", help="survivors' names only")
    args = parser.parse_args()

    metas = sorted(args.mutants.glob("src/**/*.py.meta"))
    if not metas:
        print(f"no mutmut results under {args.mutants}/ (run bench/mutation.sh)", file=sys.stderr)
        return 2
    failing: list[str] = []
    survivors: list[tuple[str, str]] = []
    header = ("module", "total", "killed", "timeout", "survived", "no tests", "score")
    print("{:<28} {:>5} {:>6} {:>7} {:>8} {:>8} {:>6}".format(*header))
    for meta in metas:
        module = str(meta.relative_to(args.mutants / "src" / "monky_deployd"))
        module = module.removesuffix(".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        status = {name: status_by_exit_code[code] for name, code in codes.items()}
        counts = Counter(status.values())
        total = len(status)
        caught = sum(counts[s] for s in CAUGHT)
        score = 100.0 * caught / total if total else 100.0
        print(
            f"{module:<28} {total:>5} {counts['killed']:>6} {counts['timeout']:>7} "
            f"{counts['survived']:>8} {counts['no tests']:>8} {score:>5.1f}%"
        )
        other = {s: n for s, n in counts.items() if s not in (*CAUGHT, "survived", "no tests")}
        if other:
            print(f"    also: {other}")
        if score < args.min_score:
            failing.append(f"{module} {score:.1f}%")
        survivors += [(n, s) for n, s in sorted(status.items()) if s not in CAUGHT]
    print()
    print(f"not killed: {len(survivors)} (accepted ones and why: bench/README.md)")
    for name, state in survivors:
        print(f"  {name}: {state}")
        if not args.no_diffs:
            for line in changed_lines(name):
                print(f"      {line[:150]}")
    if failing:
        print(f"\nbelow {args.min_score:g}%: {', '.join(failing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
