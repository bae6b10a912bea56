"""What a service asks that acts beyond its own namespaces and cgroup (issue 40: *allowed as it
is* means its effect stays inside them). Pure.

- ``logging``: a local driver (``LOCAL_LOG_DRIVERS``, or none named: the engine's default) with
  the options of ``LOG_OPTIONS`` only, unless ``log_drivers`` names the driver (any other runs
  in the engine, in the host's network namespace);
- ``oom_score_adj`` below the ``oom_score_adj`` allowance (the host's OOM killer spares it);
- ``ulimits.rtprio`` above 0, a service's or its build's (``policy.keys``);
- a host block device in ``blkio_config`` (``devices``);
- a weight above the engine's default (issue 45: a weight is relative to every other
  container's, so one container's high weight is every other app's loss): ``cpu_shares`` above
  ``CPU_SHARES_DEFAULT`` unless the ``cpu_shares`` allowance is higher, a block-I/O weight
  (``blkio_config.weight``, each ``weight_device`` entry's) above the engine's default
  (``Rules.blkio_default``) unless ``blkio_weight`` is higher.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from monky_deployd.core.admission.rules import (
    CPU_SHARES_DEFAULT,
    LOCAL_LOG_DRIVERS,
    LOG_OPTIONS,
    RELATIVE,
    Allow,
    Rules,
    Violation,
    normpath,
    scope_line,
)


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _scalar_line(service: str, key: str, value: object) -> str:
    """The config.yaml line of a one-value allowance (``oom_score_adj: -500``)."""
    scope = f"services.{service}" if service else "allow"
    return f"policy.{scope}.{key}: {value}"


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def outside(name: str, svc: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    """What a service asks that acts beyond its own namespaces and cgroup: a log driver (the
    engine runs it in the host's network namespace), an OOM score that makes the host's OOM
    killer spare it, a real-time priority limit, a host block device's I/O weight or limit."""
    may = rules.allows(name)
    yield from _logging(name, svc.get("logging"), may)
    score = svc.get("oom_score_adj")
    adj = _int(score) if score is not None else 0
    if adj is None:
        yield Violation(name, "oom_score_adj", f"{score} (not a number)")
    elif adj < may.oom_score_adj:
        yield Violation(
            name,
            "oom_score_adj",
            f"{adj} (the host's OOM killer spares the container over host processes)",
            _scalar_line(name, "oom_score_adj", adj),
        )
    yield from _ulimits(name, "ulimits", svc.get("ulimits"), rules)
    build = svc.get("build")
    if isinstance(build, dict):
        yield from _ulimits(name, "build.ulimits", build.get("ulimits"), rules)
    yield from _blkio(name, svc.get("blkio_config"), may)
    yield from weights(name, svc, may, rules.blkio_default)


def _weights_of(svc: Mapping[str, object]) -> Iterable[tuple[str, str, object]]:
    """``(key, allowance, value)`` of every weight ``svc`` asks."""
    if svc.get("cpu_shares") is not None:
        yield "cpu_shares", "cpu_shares", svc["cpu_shares"]
    blkio = svc.get("blkio_config")
    if isinstance(blkio, dict):
        if blkio.get("weight") is not None:
            yield "blkio_config.weight", "blkio_weight", blkio["weight"]
        for entry in _list(blkio.get("weight_device")):
            if isinstance(entry, dict) and (weight := _field(entry, "weight")) is not None:
                yield "blkio_config.weight_device", "blkio_weight", weight


def _field(entry: Mapping[str, object], key: str) -> object:
    """A blkio device entry's ``key``: compose's model writes ``Path``, ``Weight`` and ``Rate``
    (the engine's own spelling), the bundle's YAML ``path``, ``weight``, ``rate``; either is the
    one field (a judge reading only one of them read no path and no weight from compose)."""
    value = entry.get(key)
    return entry.get(key.capitalize()) if value is None else value


def weights(
    name: str, svc: Mapping[str, object], may: Allow, blkio_default: int
) -> Iterable[Violation]:
    """Each weight above what ``may`` allows (its allowance, else the engine's default)."""
    limits = {
        "cpu_shares": may.cpu_shares or CPU_SHARES_DEFAULT,
        "blkio_weight": may.blkio_weight or blkio_default,
    }
    for key, allowance, raw in _weights_of(svc):
        value = _int(raw)
        if value is None:
            yield Violation(name, key, f"{raw} (not a number)")
        elif value > limits[allowance]:
            yield Violation(
                name,
                key,
                f"{value} (above {limits[allowance]}, the highest this box allows: a weight is "
                "relative to every other container's, so the others get less CPU or disk time)",
                _scalar_line(name, allowance, value),
                rewrite=f"`{key}` of {limits[allowance]} or less (or none: the engine's default)",
            )


def _logging(name: str, logging: object, may: Allow) -> Iterable[Violation]:
    """``logging``: a local driver (or none named: the engine's default) with the options of
    ``LOG_OPTIONS`` only, unless ``log_drivers`` names the driver."""
    if not isinstance(logging, dict):
        return
    driver = logging.get("driver")
    driver = str(driver).strip() if driver not in (None, "") else ""
    if driver and driver in may.log_drivers:
        return
    if driver and driver not in LOCAL_LOG_DRIVERS:
        yield Violation(
            name,
            "logging.driver",
            f"{driver} (a log driver runs in the engine, in the host's network namespace: it "
            "reaches the host's sockets and addresses whatever the container's network)",
            scope_line(name, "log_drivers", driver),
        )
        return
    options = logging.get("options")
    for opt in sorted(str(k) for k in options) if isinstance(options, dict) else ():
        if opt in LOG_OPTIONS:
            continue
        whose = f"the log driver {driver}" if driver else "the engine's default log driver"
        asks = (
            f"is not an option of the engine's local log drivers (for {whose}; it may name a "
            "host address, path or socket)"
        )
        if driver:
            yield Violation(
                name, f"logging.options.{opt}", asks, scope_line(name, "log_drivers", driver)
            )
        else:
            yield Violation(
                name,
                f"logging.options.{opt}",
                asks + ": name its driver in logging.driver, then allow it with log_drivers",
            )


# rlimits whose effect leaves the container's cgroup: a real-time priority (RLIMIT_RTPRIO
# lets an unprivileged process take SCHED_FIFO/SCHED_RR, which preempts every host process)
ULIMITS_BEYOND_CGROUP = frozenset({"rtprio"})


def _ulimits(name: str, key: str, value: object, rules: Rules) -> Iterable[Violation]:
    """``ulimits`` (a service's or its build's): ``rtprio`` above 0 unless ``policy.keys``
    names ``services.<name>.<key>.rtprio``."""
    from monky_deployd.core.admission.keywalk import allowed_by

    for limit, spec in sorted(value.items()) if isinstance(value, dict) else ():
        if str(limit) not in ULIMITS_BEYOND_CGROUP:
            continue
        parts = [spec] if not isinstance(spec, dict) else [spec.get("soft"), spec.get("hard")]
        if all(p is None or _int(p) == 0 for p in parts):
            continue
        path = f"services.{name}.{key}.{limit}"
        if not allowed_by(path, rules.keys):
            yield Violation(
                name,
                path,
                f"{spec} (a real-time priority: its processes preempt every host process, "
                "beyond the container's CPU limits)",
                f"policy.keys: [{path}]",
            )


_BLKIO_DEVICES = (
    *("weight_device", "device_read_bps", "device_write_bps"),
    *("device_read_iops", "device_write_iops"),
)


def _blkio(name: str, value: object, may: Allow) -> Iterable[Violation]:
    """``blkio_config``: ``weight`` is the container's own cgroup; a per-device entry names a
    host block device (the engine looks it up by path on the host): it needs ``devices``."""
    if not isinstance(value, dict):
        return
    for key in _BLKIO_DEVICES:
        for entry in _list(value.get(key)):
            path = str(_field(entry, "path") or "") if isinstance(entry, dict) else str(entry)
            if not path.startswith("/"):
                yield Violation(name, f"blkio_config.{key}", f"{path} {RELATIVE}")
            elif normpath(path) not in may.devices:
                yield Violation(
                    name,
                    f"blkio_config.{key}",
                    f"{path} (a host block device)",
                    scope_line(name, "devices", normpath(path)),
                )
