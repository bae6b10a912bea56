"""The box's local policy: what a bundle's services may ask of the box. Pure: no I/O.

The default is Kubernetes Pod Security "baseline" adapted to compose: no ``privileged``, no host
namespace (``pid``/``ipc``/``uts``/``userns_mode``/``network_mode``/``cgroup``: host), no
capability beyond baseline's default set, no ``devices``, no unconfined or disabled
``security_opt``, only baseline's safe ``sysctls``, no ``cgroup_parent``, no bind mount (a
secret's or config's ``file``, a local volume's ``device`` too) outside the allowed roots (and
no relative path anywhere: the engine resolves it from its own working directory), nothing that
acts beyond the container's own namespaces and cgroup (a log driver other than the engine's
local ones, a negative ``oom_score_adj``, ``ulimits.rtprio``, a block device's I/O limit). Each
allowance (``Allow``) is opt-in and narrow, for every service or for one. Some paths are refused
whatever the allowances say (``Rules.protected``: the engine's sockets, ``/``, ``/etc``, ...).

``judge`` reads the *effective* configuration, the JSON of ``docker compose config --format
json`` over the rendered release (``agent.policy`` runs it): every key of it against the
allow-list (``core.admission.keys``: a key it does not know is refused), the judges here and those
of what reaches the host beyond a container (``core.admission.host``), and every host path it
names through the one host-path judge (``_bind``); ``sources`` reads the compose file's
own YAML for what compose would fetch while resolving it (``include``, ``extends.file``,
``label_file``), so it runs first. Each returns one ``Violation`` per fault; ``refusal`` makes
them one ``DeployError`` whose first line names the first fault.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from monky_deployd.core.admission.rules import (
    BASELINE_CAPS,
    FILE_TREES,
    GPU,
    HOST_NAMESPACE_KEYS,
    RELATIVE,
    REWRITE_BUILD,
    REWRITE_CONFIG,
    REWRITE_DEV,
    REWRITE_ENV_FILE,
    REWRITE_ETC,
    REWRITE_FLATTEN,
    REWRITE_FROM_ENV,
    REWRITE_PULL,
    SAFE_SYSCTLS,
    SOURCE,
    UNCONFINED_OPTS,
    Allow,
    Refusal,
    Rules,
    Violation,
    capability,
    inside,
    normpath,
    scope_line,
    security_opt,
)
from monky_deployd.core.errors import Code

if TYPE_CHECKING:
    from monky_deployd.core.admission.host import HostPath
    from monky_deployd.core.admission.keywalk import KeyFault


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _names(value: object) -> list[str]:
    return [str(v) for v in _list(value)]


REWRITE_OWN_NET = "a network of the release's own (its top-level `networks:`), or none"
REWRITE_SHARED = f"`service:<a service of the release>`, or {REWRITE_OWN_NET}"
REWRITE_CACHE = "`cache_from`/`cache_to` of the registry (`type=registry,ref=...`) or none"
_REWRITES = {
    "secrets": REWRITE_FROM_ENV,
    "build.secrets": REWRITE_FROM_ENV,
    "configs": REWRITE_CONFIG,
}


def _guards(rules: Rules, forms: set[str]) -> list[tuple[str, str]]:
    """``(form, protected path)`` for each form reaching a protected path (itself, below it or
    above it)."""
    return [
        (form, guarded)
        for form in sorted(forms)
        for guarded in rules.protected
        if (guarded != "/" and inside(form, guarded)) or inside(guarded, form)
    ]


def _one_file(found: HostPath, forms: set[str], hits: list[tuple[str, str]]) -> bool:
    """A read-only bind of one path whose every protected hit lies in ``FILE_TREES`` (not the
    agent's own files, the engine's sockets or data): what ``read_only_files`` may allow."""
    return (
        found.read_only
        and not found.path.endswith("/")
        and all(guarded in FILE_TREES and form != guarded for form, guarded in hits)
    )


def _bind(rules: Rules, found: HostPath, resolved: str, release_dir: str) -> Violation | None:
    """The one host-path judge: a protected path never (but one protected file, read-only,
    that ``read_only_files`` names exactly); a build's path inside the release; else under an
    allowed root."""
    from monky_deployd.core.admission.host import within_release

    service, key, path = found.service, found.key, found.path
    rewrite = _REWRITES.get(key, "")
    forms = {normpath(path), normpath(resolved)}
    if not path.startswith("/"):
        return Violation(service, key, f"{path} {RELATIVE}", rewrite=rewrite)
    if any(not f.startswith("/") for f in forms):
        why = "not an absolute path, or one whose links this agent cannot follow"
        return Violation(service, key, f"{path} ({why})")
    if within_release(found, forms, release_dir):
        return None
    may = rules.allows(service)
    hits = _guards(rules, forms)
    single = _one_file(found, forms, hits)
    if single and forms <= may.read_only_files:
        return None
    if hits:
        form, guarded = hits[0]
        shown = path if form == normpath(path) else f"{path} (-> {form})"
        line = scope_line(service, "read_only_files", normpath(path)) if single else ""
        asks = f"{shown} reaches {guarded}" + (" (read-only, one file)" if single else "")
        if not (rewrite or single) and key == "volumes" and guarded in FILE_TREES:
            rewrite = REWRITE_ETC  # a folder or a writable file of /etc: what it holds instead
        elif not rewrite and key == "volumes" and guarded == "/dev" and form != guarded:
            rewrite = REWRITE_DEV
        return Violation(service, key, asks, line, code=Code.POLICY_PROTECTED_PATH, rewrite=rewrite)
    roots = [normpath(r) for r in may.bind_roots]
    if all(any(inside(f, r) for r in roots) for f in forms):
        return None
    shown = path if normpath(resolved) == normpath(path) else f"{path} (-> {normpath(resolved)})"
    parents = ", ".join(dict.fromkeys(_root_for(f) for f in (normpath(path), normpath(resolved))))
    line = scope_line(service, "bind_roots", parents)  # a path through a link: both forms
    return Violation(service, key, f"{shown} is outside the allowed roots", line, rewrite=rewrite)


def _root_for(form: str) -> str:
    """The root that allows ``form``: its directory ("/" is no root to allow: itself)."""
    parent = posixpath.dirname(form) or "/"
    return form if parent == "/" else parent


def judge(
    config: Mapping[str, object],
    rules: Rules,
    resolved: Mapping[str, str] | None = None,
    release_dir: str = "/",
) -> list[Violation]:
    """Every violation of ``rules`` in ``config`` (compose's effective configuration as JSON),
    sorted; ``resolved`` maps a bind mount's host path to its real path (symlinks followed; a
    ``config`` pinned to those real paths is judged with the paths as written too);
    ``release_dir`` is the project directory (its ``.env`` is the one ``env_file`` allowed)."""
    from monky_deployd.core.admission import cgroup, keywalk
    from monky_deployd.core.admission import host as policy_host
    from monky_deployd.core.admission import names as policy_names

    seen = resolved or {}
    found = [
        Violation(f.service, f.path, _key_asks(f), f"policy.keys: [{f.path}]", f.code)
        for f in keywalk.walk(config, rules.keys)
    ]
    services = config.get("services")
    for name, svc in sorted(services.items()) if isinstance(services, dict) else ():
        if isinstance(svc, dict):
            found.extend(_service(str(name), svc, rules))
            found.extend(cgroup.outside(str(name), svc, rules))
            found.extend(policy_host.service(str(name), svc, rules))
            found.extend(_env_files(str(name), svc, normpath(release_dir + "/.env")))
            found.extend(_build_only(str(name), svc))
    found.extend(policy_host.volumes(config, rules))
    found.extend(policy_host.networks(config, rules))
    found.extend(policy_names.namespaces(config, rules))
    # a model pinned to what was resolved (core.admission.artifact.pinned) names the real path:
    # the path as the bundle wrote it is judged with it, and named first
    written = {real: path for path, real in seen.items() if real and real != path}
    for host_path in policy_host.host_paths(config):
        path = host_path.path
        if host_path.key in BUILD_HOST_READS:  # read as it is when built: never a copy
            why = "a host path the build reads or writes as it is when the image is built"
            rewrite = REWRITE_FROM_ENV if host_path.key == "build.secrets" else REWRITE_CACHE
            found.append(
                Violation(host_path.service, host_path.key, f"{path} ({why})", "",
                          Code.POLICY_BUILD, rewrite)
            )  # fmt: skip
            continue
        if path not in seen and path in written:
            host_path, real = host_path._replace(path=written[path]), path
        else:
            real = seen.get(path, path)
        hit = _bind(rules, host_path, real, release_dir)
        if hit is not None:
            found.append(hit)
    return sorted(set(found))


def _key_asks(fault: KeyFault) -> str:
    if fault.why:
        return f"is refused by default ({fault.why})"
    return "is a key this agent's policy does not know (compose may act on it; nothing judged it)"


def _service(name: str, svc: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    may = rules.allows(name)
    if svc.get("privileged") is True and not may.privileged:
        yield Violation(name, "privileged", "true", f"policy.services.{name}.privileged: true")
    for key, ns in HOST_NAMESPACE_KEYS.items():
        yield from namespace_mode(name, key, svc.get(key), ns, may)
    for raw in _names(svc.get("cap_add")):
        cap = capability(raw)
        if cap not in BASELINE_CAPS and cap not in may.cap_add:
            yield Violation(name, "cap_add", cap, scope_line(name, "cap_add", cap))
    for dev in _list(svc.get("devices")):
        src = str(dev.get("source", "")) if isinstance(dev, dict) else str(dev).split(":")[0]
        if normpath(src) not in may.devices:
            yield Violation(name, "devices", src, scope_line(name, "devices", normpath(src)))
    for key, request in _device_requests(svc):
        if GPU not in may.devices:
            yield Violation(name, key, request, scope_line(name, "devices", GPU))
    for rule in _names(svc.get("device_cgroup_rules")):
        if rule not in may.devices:
            yield Violation(name, "device_cgroup_rules", rule, scope_line(name, "devices", rule))
    for raw in _names(svc.get("security_opt")):
        opt = security_opt(raw)
        if _unsafe_opt(opt) and opt not in may.security_opt:
            yield Violation(name, "security_opt", raw, scope_line(name, "security_opt", opt))
    for key in _sysctl_names(svc.get("sysctls")):
        if key not in SAFE_SYSCTLS and key not in may.sysctls:
            yield Violation(name, "sysctls", key, scope_line(name, "sysctls", key))
    for source in _names(svc.get("volumes_from")):
        if source.startswith("container:"):  # another container's mounts, of any project
            yield Violation(name, "volumes_from", source.rsplit(":ro", 1)[0].rsplit(":rw", 1)[0])
    if isinstance(build := svc.get("build"), dict):
        yield from _build(name, build, may, imaged=bool(svc.get("image")))
    parent = svc.get("cgroup_parent")
    if parent and str(parent) not in may.cgroup_parent:
        yield Violation(
            name, "cgroup_parent", str(parent), scope_line(name, "cgroup_parent", str(parent))
        )


def _device_requests(svc: Mapping[str, object]) -> Iterable[tuple[str, str]]:
    """``(key, request)`` for each device request (the engine's GPUs and the like: ``gpus``,
    ``deploy.resources.reservations.devices``), as ``driver=.. count=.. capabilities=..``."""
    deploy = svc.get("deploy")
    resources = deploy.get("resources") if isinstance(deploy, dict) else None
    reserved = resources.get("reservations") if isinstance(resources, dict) else None
    found = [("gpus", r) for r in _list(svc.get("gpus"))]
    if isinstance(reserved, dict):
        found += [
            ("deploy.resources.reservations.devices", r) for r in _list(reserved.get("devices"))
        ]
    for key, request in found:
        words = request.items() if isinstance(request, dict) else [("request", request)]
        text = " ".join(
            f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in sorted(words)
        )
        yield key, text or "(any)"


def namespace_mode(
    name: str, key: str, value: object, namespace: str, may: Allow
) -> Iterable[Violation]:
    """The one judge of a namespace key's value (a service's ``network_mode``, ``pid``, ...,
    and its build's ``network``, which the engine reads the same way): ``host`` needs
    ``host_namespaces``; ``container:<x>`` (another container's namespace, of any project)
    never. A network it names is ``core.admission.names``' (``namespaces``)."""
    mode = "" if value is None else str(value)
    if mode.strip().lower() == "host":
        if namespace not in may.host_namespaces:
            yield Violation(name, key, "host", scope_line(name, "host_namespaces", namespace))
    elif mode.strip().lower().startswith("container:"):
        rewrite = "" if namespace != "network" else REWRITE_OWN_NET
        rewrite = REWRITE_SHARED if key == "network_mode" else rewrite
        yield Violation(name, key, f"{mode} (another container's namespace)", rewrite=rewrite)


# a build's keys that read or write a host path as it is when the image is built, not a copy
# (``core.admission.host.host_paths`` finds them): refused whatever the allowances say
BUILD_HOST_READS = ("build.secrets", "build.cache_from", "build.cache_to")


def _build(
    name: str, build: Mapping[str, object], may: Allow, imaged: bool = True
) -> Iterable[Violation]:
    """A ``build`` (``up`` builds on the box when the image is missing): refused unless the
    ``build`` allowance permits it (POLICY_BUILD: a deploy agent pulls); a privileged build
    container as ``privileged`` allows it; ``network`` judged as ``network_mode``
    (``namespace_mode``); a BuildKit entitlement or the agent's SSH agent or keys forwarded
    (``ssh``) with no allowance. A build with no ``image`` is BUNDLE_BUILD_ONLY's alone
    (``imaged``): no allowance lets a box build it, so none is offered."""
    if not may.build and imaged:
        yield Violation(
            name,
            "build",
            "builds an image on this box (a deploy agent pulls: a build runs the bundle's "
            "Dockerfile with the engine's rights and reads host files)",
            f"policy.services.{name}.build: true",
            Code.POLICY_BUILD,
            REWRITE_PULL,
        )
    if build.get("privileged") is True and not may.privileged:
        yield Violation(
            name, "build.privileged", "true", f"policy.services.{name}.privileged: true"
        )
    yield from namespace_mode(name, "build.network", build.get("network"), "network", may)
    for entitlement in _names(build.get("entitlements")):
        yield Violation(name, "build.entitlements", entitlement)
    for ssh in _names(build.get("ssh")):
        yield Violation(name, "build.ssh", ssh)


def _env_files(name: str, svc: Mapping[str, object], dotenv: str) -> Iterable[Violation]:
    """``env_file`` (compose reads it into the container's environment): the release's .env
    only."""
    for env_file in _list(svc.get("env_file")):
        path = str(env_file.get("path") if isinstance(env_file, dict) else env_file)
        if normpath(path) != dotenv:
            yield Violation(
                name,
                "env_file",
                f"{path} is not the release's .env",
                code=SOURCE,
                rewrite=REWRITE_ENV_FILE,
            )


def _build_only(name: str, svc: Mapping[str, object]) -> Iterable[Violation]:
    """A service with ``build`` and no ``image`` (BUNDLE_BUILD_ONLY): a bundle ships no build
    context, so no box can build it and ``up`` would fail after the pull."""
    if svc.get("build") is not None and not svc.get("image"):
        yield Violation(
            name,
            "build",
            "has no image: a bundle ships no build context, so no box can build it",
            code=Code.BUNDLE_BUILD_ONLY,
            rewrite=REWRITE_BUILD,
        )


def _unsafe_opt(opt: str) -> bool:
    """An option baseline refuses: a confinement turned off, a profile from a host file
    (seccomp=<path>), an SELinux user or role. ``no-new-privileges``, an AppArmor profile by
    name and an SELinux level or type are allowed."""
    key, _, value = opt.partition("=")
    if opt in UNCONFINED_OPTS:
        return True
    if key == "no-new-privileges":
        return False
    if key == "apparmor":
        return not value
    if key == "label":
        return not value.startswith(("level:", "type:"))
    return True


def _sysctl_names(value: object) -> list[str]:
    if isinstance(value, dict):
        return sorted(str(k) for k in value)
    return sorted(str(v).partition("=")[0].strip() for v in _names(value))


def sources(doc: object) -> list[Violation]:
    """What compose would read from outside the release while resolving the compose file (its
    own YAML, before compose runs): ``include``, ``extends`` of another file, ``label_file``.
    The release is one compose file and its ``.env``: any other file, local or remote, is
    outside it."""
    if not isinstance(doc, dict):
        return []
    found: list[Violation] = []
    if doc.get("include"):
        found.append(
            Violation(
                "",
                "include",
                "names files outside the release",
                code=SOURCE,
                rewrite=REWRITE_FLATTEN,
            )
        )
    services = doc.get("services")
    for name, svc in sorted(services.items()) if isinstance(services, dict) else ():
        if not isinstance(svc, dict):
            continue
        ext = svc.get("extends")
        if isinstance(ext, dict) and ext.get("file"):
            found.append(
                Violation(
                    str(name),
                    "extends.file",
                    f"{ext['file']} (a file outside the release)",
                    code=SOURCE,
                    rewrite=REWRITE_FLATTEN,
                )
            )
        if svc.get("label_file"):
            found.append(Violation(str(name), "label_file", "reads a host file", code=SOURCE))
    return found


# the order a refusal's code is chosen in: what nothing may allow first
_GRAVITY = (
    Code.POLICY_HOST_STRING,  # what the judge read is not what up reads: first
    Code.POLICY_TWO_READINGS,
    Code.POLICY_PROTECTED_PATH,
    Code.POLICY_DANGLING_LINK,
    Code.POLICY_HIDDEN_PATH,
    Code.POLICY_SWAPPABLE_PATH,
    Code.POLICY_SOURCE,
    Code.POLICY_FOREIGN_RESOURCE,
    Code.POLICY_RESOURCE_DRIFT,
    Code.POLICY_FOREIGN_TAG,
    Code.POLICY_BUILD_CONTEXT,
    Code.BUNDLE_BUILD_ONLY,
    Code.POLICY_UNKNOWN_KEY,
    Code.POLICY_BUILD,
    Code.ENV_TOO_LARGE,  # a value read from environment: up could not hand compose
    Code.POLICY_REFUSED,
)


def ordered(violations: Iterable[Violation]) -> list[Violation]:
    """``violations`` in a refusal's order: the gravest code's first."""
    return sorted(violations, key=lambda v: (_GRAVITY.index(v.code), v))


def refusal(revision: str, violations: list[Violation]) -> Refusal:
    """The one error for ``violations`` (not empty): the gravest code, its faults first, one
    line per violation."""
    found = ordered(violations)
    code = found[0].code
    first = found[0].line()
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Refusal(
        f"revision {revision} is refused by this box's policy: {first}{more}; nothing was "
        "changed, the running revision keeps running",
        code=code,
        hint="each line below names the service, the key and the config.yaml line that would "
        'allow it (OPERATIONS.md, "Local policy"), or how to write it in the bundle '
        '("Writing a bundle"); `monky-deployd bundle check` shows them before publishing',
        violations=found,
    )
