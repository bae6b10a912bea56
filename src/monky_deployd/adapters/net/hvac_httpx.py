"""hvac over the agent's own ``httpx.Client``.

``HttpxAdapter`` is an ``hvac.adapters.Adapter`` whose requests go through the client the
transport opened (plain or Ziti), so tenancy and OpenBao share one transport and hvac never builds
a ``requests.Session``. Every answer is read by ``httpio.read_capped`` (at most
``max_body_bytes``, within ``deadline_s``; ``too_large()`` names the refusal). On 200 it returns
the decoded JSON, otherwise the response; error statuses
become hvac's exceptions (``hvac.utils.raise_for_error``), which ``bao.Bao`` translates; their
text is masked first (``core.render.mask``) with the token and the login JWT the request carried,
so an OpenBao that echoes them in an error body does not pass them on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import hvac
import hvac.adapters
import hvac.utils

from monky_deployd import USER_AGENT
from monky_deployd.adapters.httpio import read_capped
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.mask import Masker


class HttpxAdapter(hvac.adapters.Adapter):  # type: ignore[misc]
    """hvac requests over an ``httpx.Client``: dict on 200 JSON, the response otherwise."""

    def __init__(
        self,
        base_uri: str,
        token: str | None = None,
        *,
        httpx_client: httpx.Client,
        timeout_s: float,
        deadline_s: float = 60.0,
        max_body_bytes: int = 1024 * 1024,
        too_large: Callable[[], DeployError] | None = None,
        namespace: str | None = None,
        **_ignored: Any,  # cert, verify, proxies, session ...: the httpx client owns transport
    ) -> None:
        # Deliberately not calling Adapter.__init__: it would build a requests.Session.
        self.base_uri = base_uri
        self.token = token
        self.namespace = namespace
        self.session = None
        self.allow_redirects = False
        self.ignore_exceptions = False
        self.strict_http = False
        self.request_header = True
        self._kwargs: dict[str, Any] = {}
        self._http = httpx_client
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s
        self._max_body = max_body_bytes
        self._too_large = too_large or self._default_too_large

    def _default_too_large(self) -> DeployError:
        return DeployError(
            f"{self.base_uri} answered with more than {self._max_body} bytes; refused unread",
            code=Code.OPENBAO_RESPONSE_TOO_LARGE,
            hint=f"what listens at {self.base_uri}",
        )

    def close(self) -> None:
        """The httpx client belongs to the agent's transport; the adapter does not close it."""

    def get_login_token(self, response: Any) -> str:
        return str(response["auth"]["client_token"])

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        raise_exception: bool = True,
        **kwargs: Any,
    ) -> Any:
        while "//" in url:
            url = url.replace("//", "/")
        full = self.urljoin(self.base_uri, url)
        hdrs = dict(headers or {})
        hdrs["User-Agent"] = USER_AGENT
        if self.request_header:
            hdrs["X-Vault-Request"] = "true"
        if self.token:
            hdrs["X-Vault-Token"] = self.token
        if self.namespace:
            hdrs["X-Vault-Namespace"] = self.namespace
        verb = method.upper()
        params = kwargs.get("params") or None
        if verb == "LIST":
            verb, params = "GET", {**(params or {}), "list": "true"}
        response = read_capped(
            self._http,
            verb,
            full,
            max_bytes=self._max_body,
            deadline_s=self._deadline_s,
            too_large=self._too_large,
            headers=hdrs,
            params=params,
            json=kwargs.get("json"),
            timeout=self._timeout_s,
            follow_redirects=False,
        )
        if response.status_code >= 400 and raise_exception:
            body = kwargs.get("json")
            jwt = body.get("jwt") if isinstance(body, dict) else None
            sent = Masker(s for s in (self.token, jwt) if isinstance(s, str))
            self._raise_for_error(verb, full, response, sent)
        if response.status_code == 200:
            try:
                return response.json()
            except ValueError:
                return response
        return response

    @staticmethod
    def _raise_for_error(method: str, url: str, response: httpx.Response, masker: Masker) -> None:
        text = masker(response.text)
        errors: Any = None
        body: Any = None
        try:
            body = masker.mask_obj(response.json())
            errors = body.get("errors") if isinstance(body, dict) else None
        except ValueError:
            pass
        if errors is not None and not isinstance(errors, list):
            errors = [str(errors)]
        hvac.utils.raise_for_error(
            method,
            url,
            response.status_code,
            None if errors else text[:300],
            errors=[str(e) for e in errors] if errors else None,
            text=text,
            json=body,
        )
