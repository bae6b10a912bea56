"""The agent's exception tree: a fault the agent can name, carrying its ``Code`` (``core.errors``:
the catalogue, every code's family, outcome and exit status).

Every fault the agent can name is a ``DeployError`` carrying:

- ``code``: a ``Code``;
- ``message``: one sentence naming the real fault (never a secret);
- ``hint``: what the operator should check;
- ``detail``: the other side's own words (registry, compose, a service's error body), secrets
  removed, possibly empty;
- ``outcome``: the code's, unless the raise site knows better (only DOCKER_UNAVAILABLE has two:
  failed when the engine vanishes mid-apply, refused when the pre-flight cannot ask it).

The code says what happened, so a raise site names one (``DeployError(msg, code=Code.X)``) and a
new fault is three lines: its ``Code`` member with its catalogue row, the raise site, its row in
OPERATIONS.md. Subclasses exist only where a caller catches a group by class; everything else is
a plain ``DeployError`` (a code's family, not a class, says where it comes from). Lower-level
exceptions are translated at the boundary with ``raise DeployError(...) from exc`` and never
reach the operator as a traceback.

    DeployError            any named fault; the tick catches it and reports its code
    ├── ConfigError        config.yaml missing, unreadable or invalid: caught by the CLI (exit 3)
    ├── TokenError         no usable token (grant, lease, token invalid): caught by the tick
    │                      (TOKEN_INVALID at check-in) and TokenKeeper (grant re-read, rotation)
    ├── BaoError           OpenBao answered something unusable: caught by the tick (SECRET_MISSING)
    │   └── RenewRefused   (adapters/net/bao.py) renew-self refused: caught by TokenKeeper
    ├── EnvError           the .env cannot be rendered: caught by prepare (ENV_INCOMPLETE)
    ├── CommandError       a subprocess (docker, docker compose) failed: caught by the pre-flight
    └── RateLimited        (adapters/net/tenancy.py) LEASE_RATE_LIMITED with tenancy's wait:
                           caught by TokenKeeper

    TickDeadline           (a BaseException, not a DeployError) the tick's overall deadline ran
                           out: no ``except DeployError`` or ``except Exception`` can swallow it
                           on its way to the frames that own the tick's end (the failure record,
                           the rollback on its own budget, a restore's backoff); its ``fault`` is
                           the TICK_DEADLINE DeployError the operator reads
"""

from __future__ import annotations

from typing import TypeVar

from monky_deployd.core.errors import Code, Outcome


class DeployError(Exception):
    """A fault the agent can name. ``str(err)`` is the operator-facing first line."""

    def __init__(
        self,
        message: str,
        *,
        code: Code,
        hint: str = "",
        detail: str = "",
        outcome: Outcome | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.detail = detail
        self.outcome: Outcome = outcome or code.outcome

    def restated(self, message: str, hint: str | None = None) -> DeployError:
        """The same fault (code, detail, outcome) said with more: ``message``, and ``hint``
        when given."""
        return DeployError(
            message,
            code=self.code,
            hint=self.hint if hint is None else hint,
            detail=self.detail,
            outcome=self.outcome,
        )

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.hint:
            text += ("" if text.rstrip().endswith((".", ":")) else ".") + f" Check: {self.hint}"
        return text


class TickDeadline(BaseException):
    """The tick's overall deadline ran out (``adapters.deadline``); ``fault`` is the named
    TICK_DEADLINE error. A ``BaseException`` so that only the frames that end a tick catch it
    (``except (DeployError, TickDeadline)`` there; ``fault_of`` gives the DeployError)."""

    def __init__(self, fault: DeployError) -> None:
        super().__init__(str(fault))
        self.fault = fault


def fault_of(exc: DeployError | TickDeadline) -> DeployError:
    """The named fault of a caught ``DeployError`` or ``TickDeadline``."""
    return exc.fault if isinstance(exc, TickDeadline) else exc


class ConfigError(DeployError):
    """config.yaml is missing, unreadable or invalid: the CLI catches it (exit 3, no tick)."""


class BaoError(DeployError):
    """OpenBao answered something the agent cannot use: the tick catches SECRET_MISSING."""


class TokenError(DeployError):
    """No usable token: the tick (TOKEN_INVALID: one re-acquire) and TokenKeeper catch it."""


class EnvError(DeployError):
    """The .env cannot be rendered: prepare catches it to add the bundle's context."""


class CommandError(DeployError):
    """A subprocess (docker, docker compose) failed: the pre-flight catches it."""


_E = TypeVar("_E", bound=BaseException)


def in_chain(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first ``kind`` in ``exc``'s cause chain (``exc`` itself, then its ``__cause__`` or
    ``__context__``, at most 20 deep); None when there is none."""
    seen: BaseException | None = exc
    for _ in range(20):
        if seen is None:
            return None
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def named_cause(exc: BaseException) -> DeployError | None:
    """The first ``DeployError`` in ``exc``'s cause chain: a lower layer (the Ziti transport
    under httpx) that already named the fault; None when there is none."""
    return in_chain(exc, DeployError)


def root_words(exc: BaseException) -> str:
    """The innermost exception's words (the OS's or the library's), for a sentence."""
    seen = exc
    for _ in range(20):
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    return str(seen) or type(seen).__name__
