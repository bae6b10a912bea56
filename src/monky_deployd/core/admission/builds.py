"""What a build reads and what it names (issue 45: builds off by default, box-wide names). Pure.

A build the ``build`` allowance permits reads its context, its Dockerfile and its
``additional_contexts`` from host paths: judged where they are, then read by compose a moment
later, while a container that can write there may swap a link in. So nothing a build reads is
read where the bundle named it: ``copies`` plans a copy of each into the revision's own
directory (``build/<n>/``: the agent's, which no container may bind; the Dockerfile always a
regular file of its own there, ``build/<n>/Dockerfile``) and rewrites the model to build from
the copy; ``adapters.box.buildcopy`` makes it without following any link
(POLICY_BUILD_CONTEXT when it cannot). A path inside the release itself is its compose file and
``.env``: nothing a build should read, so its copy is an empty directory.

An image name is box-wide: building (or pulling a local-only image over) a tag another
project's containers run moves it, and that app's next recreate runs this release's image with
its own secrets. ``foreign_tags`` refuses (POLICY_FOREIGN_TAG) each such name, from the engine's
facts (``Users``: each image name -> the projects of the containers created from it, and
whether the image of that name came from a registry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

from monky_deployd.core.admission.rules import REWRITE_TAG, Violation, inside, normpath
from monky_deployd.core.errors import Code

BUILD_DIR = "build"  # under the revision directory: build/<n>/{context,Dockerfile,extra/<m>}


class Copy(NamedTuple):
    """One path a build reads, to copy: the service and key, the judged source (its links
    resolved; "" for an empty directory), where the copy goes (relative to the revision
    directory) and whether it is one file (a Dockerfile outside its context)."""

    service: str
    key: str
    source: str
    dest: str
    file: bool = False


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _is_path(text: str) -> bool:
    from monky_deployd.core.admission.host import _NOT_PATHS, _is_url

    return not text.startswith(_NOT_PATHS) and not _is_url(text)


def copies(
    model: Mapping[str, object], resolved: Mapping[str, str], release_dir: str
) -> tuple[dict[str, object], list[Copy]]:
    """``model`` rewritten to build from copies in ``release_dir`` (see the module), and the
    copies to make; ``resolved`` maps each host path to its real path (what was judged)."""
    out: dict[str, object] = json.loads(json.dumps(model))
    root = normpath(release_dir)
    plan: list[Copy] = []

    def source(path: str) -> str:
        real = normpath(resolved.get(path) or path)
        return "" if inside(real, root) else real

    for n, (name, svc) in enumerate(sorted(_dict(out.get("services")).items())):
        build = _dict(_dict(svc).get("build"))
        context = build.get("context")
        if not isinstance(context, str) or not _is_path(context):
            continue  # a URL is refused by core.admission.host
        base = f"{BUILD_DIR}/{n}"
        plan.append(Copy(name, "build.context", source(context), f"{base}/context"))
        build["context"] = f"{root}/{base}/context"
        dockerfile = build.get("dockerfile")
        if isinstance(dockerfile, str) and not build.get("dockerfile_inline"):
            # always a file of its own, opened without following a link: the docker CLI
            # follows a Dockerfile that is a link (to /etc/shadow) and sends what it reads
            written = dockerfile if dockerfile.startswith("/") else f"{context}/{dockerfile}"
            plan.append(Copy(name, "build.dockerfile", source(written), f"{base}/Dockerfile", True))
            build["dockerfile"] = f"{root}/{base}/Dockerfile"
        extra = _dict(build.get("additional_contexts"))
        for m, (label, value) in enumerate(sorted(extra.items())):
            if isinstance(value, str) and _is_path(value):
                plan.append(Copy(name, f"build.additional_contexts.{label}", source(value),
                                 f"{base}/extra/{m}"))  # fmt: skip
                extra[label] = f"{root}/{base}/extra/{m}"
    return out, plan


def ref(name: str) -> str:
    """An image reference as the engine keys it (the docker reference library's
    ``ParseNormalizedNamed`` then ``FamiliarString``): the first component is a registry when it
    has a ``.`` or ``:``, is ``localhost`` or is not lower case, else the name is Docker Hub's;
    ``index.docker.io`` is Docker Hub; Docker Hub's ``library/`` of a one-component name and the
    ``docker.io/`` are dropped; ``:latest`` added when it names no tag or digest. Every spelling
    the engine keys alike gives the same text (``index.docker.io/team/app``, ``docker.io/team/app``
    and ``team/app``; ``library/x`` and ``x``), so a name is compared as the engine stores it."""
    text = name.strip()
    first, slash, rest = text.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        domain, path = ("docker.io" if first == "index.docker.io" else first), rest
    else:
        domain, path = "docker.io", text
    if domain == "docker.io":
        if path.startswith("library/") and "/" not in path[len("library/") :]:
            path = path[len("library/") :]
        ref = path
    else:
        ref = f"{domain}/{path}"
    last = ref.rsplit("/", 1)[-1]
    return ref if ("@" in ref or ":" in last) else f"{ref}:latest"


class User(NamedTuple):
    """Who runs an image name: the projects of the containers created from it (None: a
    container with no compose label, made by hand) and whether the image the name gives now
    came from a registry (it has a RepoDigest: a pull of that name gives what a pull by its
    own app would)."""

    projects: frozenset[str | None]
    pulled: bool


Users = Mapping[str, User]  # image reference (``ref``) -> its users


def images(model: Mapping[str, object]) -> list[tuple[str, str, bool]]:
    """``(service, image reference, built)`` of every service naming an ``image``."""
    found = []
    for name, svc in sorted(_dict(model.get("services")).items()):
        image = _dict(svc).get("image")
        if isinstance(image, str) and image:
            found.append((str(name), ref(image), _dict(svc).get("build") is not None))
    return found


def foreign_tags(
    model: Mapping[str, object], project: str, users: Users, mine: frozenset[str] = frozenset()
) -> list[Violation]:
    """Each image name of ``model`` whose tag would move under another project's containers
    (POLICY_FOREIGN_TAG): a built one any of whose users is not ``project`` (nor one of
    ``mine``, the projects this agent started: a project renamed); a pulled one whose image
    now is local only (built or loaded on the box: a pull would replace it)."""
    own = {str(model.get("name") or project), *mine}
    found = []
    for service, ref, built in images(model):
        user = users.get(ref)
        others = [p for p in (user.projects if user else ()) if p not in own]
        if not others or (not built and user is not None and user.pulled):
            continue
        whose = ", ".join(
            sorted("a container made by hand" if p is None else f"project {p}" for p in others)
        )
        how = "building it here" if built else "pulling it over the box's local image"
        asks = (
            f"{ref} is the image name {whose} runs: {how} moves that tag, and their next "
            "recreate runs this release's image"
        )
        found.append(Violation(service, "image", asks, "", Code.POLICY_FOREIGN_TAG, REWRITE_TAG))
    return found
