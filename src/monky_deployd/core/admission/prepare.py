"""The apply's checks, before anything on the box changes. Pure: no I/O.

``agent.tick.tick`` runs them in order, each inside its phase, with the two I/O steps between them
(reading OpenBao, asking ``docker info``):

    bundle    validate tenancy's bundle                        check_bundle
    secrets   read every manifest entry from OpenBao           (agent)  -> SecretReads
    render    coerce values, render .env                       env_values + render_env
              a container could start with it (env_file)       check_environment
    registry  parse the registry credential                    credential
    preflight disk space on every filesystem a pull writes to  (agent +
    adapters.box.docker.preflight)
              the bundle's project is the agent's own           check_owned

Then ``ready`` gathers what ``core.lifecycle.boxsteps.apply_steps`` needs.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from monky_deployd.core.admission.bundle import Bundle, ManifestEntry, validate
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, EnvError
from monky_deployd.core.lifecycle.boxsteps import BuildCopies, Ready
from monky_deployd.core.lifecycle.verify import started_services
from monky_deployd.core.render import envfile, registry_cred
from monky_deployd.core.render.registry_cred import Credential


@dataclass(frozen=True)
class SecretReads:
    """What OpenBao answered for a bundle's manifest."""

    found: Mapping[ManifestEntry, object] = field(repr=False)  # manifest entry -> KV value
    absent: Mapping[str, str]  # variable name -> "path#key" OpenBao does not have


@dataclass(frozen=True)
class EnvValues:
    values: Mapping[str, str] = field(repr=False)  # variable name -> text for .env
    absent: Mapping[str, str]
    registry_value: object = field(repr=False)  # the registry credential's raw value, or None

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret text of the tick so far, for masking child output."""
        reg = () if self.registry_value is None else (str(self.registry_value),)
        return tuple(self.values.values()) + reg


def check_bundle(revision: str, raw: Mapping[str, object]) -> Bundle:
    """The bundle, validated; at most one registry-auth entry."""
    bundle = validate(revision, dict(raw))
    registry_cred.select_entry([{"name": e.name, "use": e.use} for e in bundle.manifest])
    return bundle


def env_values(bundle: Bundle, reads: SecretReads) -> EnvValues:
    """Variable values as .env text: strings as they are, numbers in decimal; anything else
    (a list, an object, a boolean) is refused with SECRET_NOT_STRING."""
    values: dict[str, str] = {}
    registry_value: object = None
    for entry in bundle.manifest:
        if entry not in reads.found:
            continue
        value = reads.found[entry]
        if entry.use is not None:
            registry_value = value
        elif isinstance(value, str):
            values[entry.name] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            values[entry.name] = str(value)
        else:
            raise EnvError(
                f"secret {entry.path}#{entry.key} for variable {entry.name} is a "
                f"{type(value).__name__}, not a string",
                code=Code.SECRET_NOT_STRING,
                hint=f"the value stored at {entry.path} in OpenBao's KV mount",
            )
    return EnvValues(values, dict(reads.absent), registry_value)


def render_env(template: str, env: EnvValues) -> str:
    """``envfile.render``; an ENV_INCOMPLETE also names the variables OpenBao lacks."""
    try:
        return envfile.render(template, env.values)
    except EnvError as err:
        lacking = [f"{name} ({where})" for name, where in sorted(env.absent.items())]
        if err.code is not Code.ENV_INCOMPLETE or not lacking:
            raise
        raise EnvError(
            f"{err.message}; not found in OpenBao: {', '.join(lacking)}",
            code=err.code,
            hint=err.hint,
        ) from err


def check_environment(bundle: Bundle, env_text: str) -> None:
    """Refuse (ENV_TOO_LARGE) a rendered ``.env`` that a service taking it as ``env_file`` could
    not start with (``core.render.envsize``)."""
    if not bundle.env_file_services:
        return
    from monky_deployd.core.render import envsize  # off the no-op tick's imports

    envsize.check(env_text, bundle.env_file_services)


def credential(bundle: Bundle, env: EnvValues) -> Credential | None:
    """The bundle's registry credential, parsed; None when the bundle has no such entry."""
    if not bundle.registry_entries:
        return None
    return registry_cred.parse_credential(env.registry_value, bundle.registry_host)


def ready(
    bundle: Bundle,
    env_text: str,
    cred: Credential | None,
    deploy_id: str = "",
    model: str = "",
    builds: BuildCopies = (),
) -> Ready:
    """What the box steps need; ``deploy_id`` (the tick's id) labels the containers;
    ``model``: the judged model every compose call of the revision runs; ``builds``: the
    copies its builds read (``core.admission.builds``), made when it is staged."""
    from monky_deployd.core.records import reasons  # off the no-op tick's imports

    return Ready(
        revision=bundle.revision,
        project=bundle.project,
        compose=bundle.compose,
        env_text=env_text,
        services=started_services(bundle.compose, bundle.services),
        registry_host=bundle.registry_host,
        credential=cred,
        on_failure=bundle.on_failure,
        deploy_id=deploy_id,
        labels=reasons.labels_override(bundle.revision, deploy_id, bundle.services)
        if deploy_id
        else "",
        model=model,
        builds=builds,
    )


def secrets_of(env: EnvValues, cred: Credential | None) -> tuple[str, ...]:
    """Every secret of an apply (KV values, the registry value, its password and the
    ``auth`` docker keeps), for masking."""
    return env.secrets + ((cred.password, cred.basic_auth()) if cred is not None else ())


def check_owned(
    project: str,
    working_dirs: Mapping[str, str],
    revisions_root: str,
    leftovers: Sequence[str] = (),
    known: bool = False,
) -> None:
    """Refuse (PROJECT_NOT_OWNED) a compose project the agent did not create: one with a
    container whose project directory (compose's ``working_dir`` label; ``working_dirs`` maps
    container name -> label) is not one of the agent's ``revisions/<rev>/`` directories; or,
    with no container at all, one whose volumes or networks (``leftovers``: compose labels them
    with the project only) exist though the agent never started the project (``known``: it is
    in ``projects.json`` or applied). ``up --remove-orphans`` would otherwise delete that
    project's containers, and ``up`` would adopt its volumes."""
    root = posixpath.normpath(revisions_root) + "/"
    hint = (
        "the bundle's project name (pick one no other compose project on the box uses), "
        f"or remove that project (`docker compose -p {project} down`) if it is really stale; "
        f"the agent only touches projects started from {root}"
    )
    if not working_dirs and leftovers and not known:
        named = ", ".join(leftovers[:10]) + (
            f" and {len(leftovers) - 10} more" if len(leftovers) > 10 else ""
        )
        raise DeployError(
            f"compose project {project!r} already exists on this box and was not created by "
            f"monky-deployd: it has no container but {len(leftovers)} "
            f"volume(s)/network(s) labelled with its name ({named}), and "
            "monky-deployd never started a project of that name; nothing was pulled or changed",
            code=Code.PROJECT_NOT_OWNED,
            hint=hint.replace(
                f"`docker compose -p {project} down`", "`docker volume rm` / `docker network rm`"
            ),
        )
    foreign = {
        name: wd
        for name, wd in sorted(working_dirs.items())
        if not (wd and posixpath.normpath(wd).startswith(root))  # inside, not the root itself
    }
    if not foreign:
        return
    shown = ", ".join(
        f"{name} (from {wd or 'no project directory'})" for name, wd in foreign.items()
    )
    raise DeployError(
        f"compose project {project!r} already exists on this box and was not created by "
        f"monky-deployd: {len(foreign)} of its containers were started elsewhere: {shown}; "
        "nothing was pulled or changed",
        code=Code.PROJECT_NOT_OWNED,
        hint=hint,
    )
