"""Render time of the ``.env`` template by size and shape: the renderer must stay linear (it ran
in the render phase, holding the tick lock, for 102 s on a 1.3 MB template before it was).

    .venv/bin/python bench/envfile_render.py              # this checkout
    PYTHONPATH=<other checkout>/src .venv/bin/python bench/envfile_render.py   # another one

Prints CPU seconds (process time: the machine's other load does not count) per shape and size,
up to the largest template a check-in answer can carry (``max_bundle_bytes``, 4 MiB). Shapes:
``defaults`` one long line of ``${A:-d}`` (Compose's own defaults; quadratic before),
``assignments`` one ``K=... ${A} ...`` per line, ``quoted`` one long double-quoted value with
escapes, ``comments`` comment lines only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from monky_deployd.core.faults import DeployError
from monky_deployd.core.render import envfile

LIMIT = 4 * 1024 * 1024
SIZES = (64 * 1024, 256 * 1024, 1300 * 1000, LIMIT)
SHAPES: dict[str, Callable[[int], str]] = {
    "defaults": lambda n: "K=" + "x ${A:-d} " * (n // 10) + "\n",
    "assignments": lambda n: "".join(f"K{i:07d}=v ${{A}} w\n" for i in range(n // 20)),
    "quoted": lambda n: 'K="' + "ab ${A} \\n" * (n // 10) + '"\n',
    "comments": lambda n: "# a comment line\n" * (n // 17),
}
BUDGET_S = 60.0  # a shape that takes longer at one size is not run at the next


def main() -> None:
    shapes = sys.argv[1:] or list(SHAPES)
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        sys.exit(f"usage: envfile_render.py [SHAPE ...]  (shapes: {', '.join(SHAPES)})")
    print(f"{'shape':<12} {'bytes':>9} {'cpu s':>8}  outcome")
    for shape in shapes:
        for size in SIZES:
            template = SHAPES[shape](size)
            started = time.process_time()
            try:
                envfile.render(template, {"A": "v"})
                outcome = "rendered"
            except DeployError as err:  # a value over the 128 KiB env string limit, say
                outcome = str(err.code)
            took = time.process_time() - started
            print(f"{shape:<12} {len(template.encode()):>9} {took:>8.3f}  {outcome}", flush=True)
            if took > BUDGET_S:
                print(f"{shape:<12} (larger sizes skipped: over {BUDGET_S:.0f} s)")
                break


if __name__ == "__main__":
    main()
