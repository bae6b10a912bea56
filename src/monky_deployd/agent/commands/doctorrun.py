"""What the checks of one ``monky-deployd doctor`` run learn and share (``Run``): the config,
the clients, the identity, the token, the bundle, the secrets its output masks. ``doctor``
makes it; ``doctor``, ``doctor_box`` and ``doctor_ziti``'s checks read and fill it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from monky_deployd.adapters.net import identity
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Probe, Tenancy
from monky_deployd.config import Config
from monky_deployd.core.admission.bundle import Bundle
from monky_deployd.core.commands import checks

Clock = Callable[[], float]


@dataclass
class Run:
    """What the checks learn and share within one doctor run."""

    config_path: Path
    clock: Clock
    cfg: Config | None = None
    client: httpx.Client | None = None
    ziti_ctx: Any = None
    ziti_view: Any = None  # core.wire.zitictl.View: the identity as the controller sees it
    ident: identity.Identity | None = None
    tenancy: Tenancy | None = None
    bao: Bao | None = None
    probe: Probe | None = None
    probed_at: float = 0.0
    token: str | None = None
    token_kind: str = ""
    own_login: bool = False  # doctor logged in itself: revoke that token at the end
    bundle: Bundle | None = None
    registry_value: object = None
    docker_info: dict[str, object] | None = None
    secrets: list[str] = field(default_factory=list)  # for the output's masker
    timer_status: checks.Status | None = None  # the timer check's, once it ran

    @property
    def config(self) -> Config:
        assert self.cfg is not None
        return self.cfg
