"""The one way the agent reads an HTTP answer: capped in size, bounded by an overall deadline.

Every service the agent asks (tenancy, OpenBao over hvac, the Docker Engine API socket) goes
through ``read_capped``: it streams the body and stops at ``max_bytes`` with the caller's named
refusal (the connection is closed unread), and it holds ``deadline.request(deadline_s)`` for the
whole exchange. ``PoolTransport`` is the httpx transport that honours it: an httpcore pool whose
network backend (``DeadlineBackend``) cuts every connect, read and write timeout to the time left
on the nearest deadline (the request's or the tick's), so a peer that drips a byte at a time is
cut off when the deadline runs out, not when it pleases. The timeout exception then carries the
deadline (``deadline.mark``; ``deadline.expired_in`` finds it in the chain).
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn, TypeVar

import httpcore
import httpx

from monky_deployd.adapters import deadline
from monky_deployd.core.faults import DeployError

_T = TypeVar("_T")


def read_capped(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    max_bytes: int,
    deadline_s: float,
    too_large: Callable[[], DeployError],
    **kwargs: Any,
) -> httpx.Response:
    """``client.request(method, url, **kwargs)`` with the body read here: more than ``max_bytes``
    (declared or received) raises ``too_large()``; the whole exchange ends within ``deadline_s``
    (httpx's timeout exceptions, marked with the deadline). Identity encoding is asked for; a
    service that compresses anyway is counted decoded, so memory stays within the cap plus one
    decoded chunk."""
    headers = dict(kwargs.pop("headers", None) or {})
    headers.setdefault("Accept-Encoding", "identity")  # no compression bombs asked for
    with (
        deadline.request(deadline_s),
        client.stream(method, url, headers=headers, **kwargs) as resp,
    ):
        declared = resp.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large()
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise too_large()
            chunks.append(chunk)
        resp._content = b"".join(chunks)
        return resp


class PoolTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool whose streams honour ``deadline``."""

    def __init__(
        self,
        network_backend: httpcore.NetworkBackend | None = None,
        *,
        uds: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 10,
    ) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=max_connections,
            network_backend=DeadlineBackend(network_backend or httpcore.SyncBackend()),
            uds=uds,
            retries=0,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with httpx_errors():
            response = self._pool.handle_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


# httpcore's exceptions and their httpx twins, most specific first.
_ERROR_MAP: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def httpx_errors() -> Iterator[None]:
    """Re-raise httpcore's exceptions as httpx's; anything else (TransportError) passes."""
    try:
        yield
    except Exception as exc:
        for core_type, httpx_type in _ERROR_MAP:
            if isinstance(exc, core_type):
                raise httpx_type(str(exc)) from exc
        raise


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, response: httpcore.Response) -> None:
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        with httpx_errors():
            yield from self._response.iter_stream()

    def close(self) -> None:
        self._response.close()


def _clamp(timeout: float | None, timeout_type: type[Exception]) -> float | None:
    try:
        return deadline.clamp(timeout)
    except deadline.Expired as exc:
        new = timeout_type(str(exc))
        deadline.mark(new, exc.bound)
        raise new from exc


def _expired(
    exc: Exception, timeout_type: type[Exception], timeout: float | None, left: float | None
) -> NoReturn:
    """Re-raise a timeout, as the deadline's when the deadline cut it short or has run out."""
    bound = deadline.binding(timeout, left) or deadline.expired()
    if bound is None:
        raise exc
    new = timeout_type(str(exc))
    deadline.mark(new, bound)  # httpcore's pool re-raises ``from None``: a cause would be lost
    raise new from exc


def _within(
    timeout_type: type[Exception], timeout: float | None, op: Callable[[float | None], _T]
) -> _T:
    """``op`` with its timeout cut to the time left; its timeout named as the deadline's when
    the deadline cut it short."""
    left = _clamp(timeout, timeout_type)
    try:
        return op(left)
    except timeout_type as exc:
        _expired(exc, timeout_type, timeout, left)


class DeadlineBackend(httpcore.NetworkBackend):
    """Wraps a network backend: every connect/read/write timeout is cut to the time left."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = _within(
            httpcore.ConnectTimeout,
            timeout,
            lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options),
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = _within(
            httpcore.ConnectTimeout,
            timeout,
            lambda t: self._inner.connect_unix_socket(path, t, socket_options),
        )
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _within(httpcore.ReadTimeout, timeout, lambda t: self._inner.read(max_bytes, t))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _within(httpcore.WriteTimeout, timeout, lambda t: self._inner.write(buffer, t))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        tls = _within(
            httpcore.ConnectTimeout,
            timeout,
            lambda t: self._inner.start_tls(ssl_context, server_hostname, t),
        )
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
