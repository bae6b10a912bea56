"""``<state_dir>/docker/``: the docker client config every docker child runs with.

``core.render.registry_cred`` decides the bytes (``auths`` only); this module writes them (0600 in a
0700 directory the agent owns) and builds the ``DOCKER_CONFIG`` / ``DOCKER_HOST`` part of a
child's environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from monky_deployd.adapters import fsutil
from monky_deployd.adapters.box.state.aside import CONFIG_NAME
from monky_deployd.core.render.registry_cred import Credential, render_docker_config

CONFIG_MODE = 0o600
DIR_MODE = 0o700


def write_docker_config(
    docker_dir: Path, registry_host: str | None, cred: Credential | None
) -> bool:
    """Write ``<docker_dir>/config.json``; return False (file untouched) when nothing changed.

    The directory is forced to 0700 and the file to 0600. A file that holds the right bytes but
    has the wrong mode or owner is rewritten (``atomic_write`` creates a new file we own).
    """
    fsutil.ensure_private_dir(docker_dir, DIR_MODE)
    path = docker_dir / CONFIG_NAME
    data = render_docker_config(registry_host, cred)
    if fsutil.read_if_exists(path) == data:
        st = path.stat()
        if (st.st_mode & 0o777) == CONFIG_MODE and st.st_uid == os.geteuid():
            return False
    fsutil.atomic_write(path, data, CONFIG_MODE)
    return True


def docker_env(docker_dir: Path, docker_host: str | None = None) -> dict[str, str]:
    """The docker-specific part of a child's environment (merge into ``runner.base_env``)."""
    env = {"DOCKER_CONFIG": str(docker_dir)}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env
