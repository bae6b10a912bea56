"""Measure ``core.render.mask.Masker``: building it, and masking long outputs with many secrets.

    .venv/bin/python bench/mask.py

For several (secrets, output size) pairs it prints the time to build the masker, to mask an
output that holds no secret (the common case: every log line, every child's output) and one that
holds a secret in several forms every 4 KiB, in CPU milliseconds and MB/s (median of 5). The naive
line is the old ``str.replace`` of each raw value (one pass per secret, raw form only), for scale.
"""

from __future__ import annotations

import json
import random
import statistics
import string
import time
from collections.abc import Callable

from monky_deployd.core.render.mask import Masker, _part

ALPHABET = string.ascii_letters + string.digits + "+/=-_:\"'\\$ é"


def secrets(n: int, rng: random.Random) -> list[str]:
    out = []
    for i in range(n):
        if i % 10 == 0:  # a PEM-like multi-line key now and then
            body = "\n".join("".join(rng.choices(ALPHABET[:64], k=64)) for _ in range(25))
            out.append(f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----")
        else:
            out.append("".join(rng.choices(ALPHABET, k=rng.randint(12, 64))))
    return out


def output(size: int, rng: random.Random, planted: list[str]) -> str:
    """Compose-like lines; with ``planted``, a secret in some form every 4 KiB."""
    words = ["Container", "web-1", "Creating", "Pulling", "Error", "response", "from", "daemon:"]
    parts: list[str] = []
    total = 0
    while total < size:
        line = " ".join(rng.choices(words, k=8)) + f" {rng.randrange(10**8):08d}\n"
        if planted and total // 4096 != (total + len(line)) // 4096:
            s = rng.choice(planted)
            line += rng.choice([s, json.dumps(s), repr(s), s[: len(s) // 2 + 8]]) + "\n"
        parts.append(line)
        total += len(line)
    return "".join(parts)


def median_ms(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        started = time.process_time()  # CPU time: the machine may be shared
        fn()
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def naive(text: str, values: list[str]) -> str:
    for s in sorted(values, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def row(n: int, size: int, rng: random.Random) -> str:
    values = secrets(n, rng)

    def build() -> Masker:
        _part.cache_clear()  # the per-secret parts are cached: measure a cold build
        return Masker(values)

    t_build = median_ms(build, runs=3)
    m = Masker(values)
    clean = output(size, rng, [])
    dirty = output(size, rng, values)
    assert m(clean) == clean
    masked = m(dirty)
    assert not any(s[:8] in masked for s in values)
    t_clean = median_ms(lambda: m(clean))
    t_dirty = median_ms(lambda: m(dirty))
    t_naive = median_ms(lambda: naive(dirty, values))
    mb = size / 1e6
    return (
        f"{n:>7} {size // 1024:>6}Ki {t_build:>9.1f} {t_clean:>9.1f} {mb / t_clean * 1e3:>10.1f} "
        f"{t_dirty:>9.1f} {mb / t_dirty * 1e3:>10.1f} {t_naive:>9.1f}"
    )


def main() -> None:
    rng = random.Random(11)
    print(
        f"{'secrets':>7} {'output':>8} {'build ms':>9} {'clean ms':>9} {'clean MB/s':>10} "
        f"{'dirty ms':>9} {'dirty MB/s':>10} {'naive ms':>9}"
    )
    for n, size in ((10, 64 * 1024), (10, 1 << 20), (100, 1 << 20), (100, 8 << 20), (500, 1 << 20)):
        print(row(n, size, rng), flush=True)


if __name__ == "__main__":
    main()
