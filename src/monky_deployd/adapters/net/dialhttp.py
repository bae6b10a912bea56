"""httpx over an httpcore connection pool whose network backend opens connections with ``dial``.

``dial((host, port)) -> socket.socket`` is the only seam: the OpenZiti SDK's ``ctx.connect`` in
production (see ``ziti.py``), a plain ``socket.create_connection`` or any stand-in returning a
connected socket in tests. Nothing here patches ``socket`` or resolves names: the host and port of
the URL go to ``dial`` as they are, which is what dialling by intercept address needs.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import httpcore

from monky_deployd.adapters.httpio import PoolTransport

Address = tuple[str, int]
Dial = Callable[[Address], socket.socket]
NameFailure = Callable[[Address, BaseException, float], Exception]
T = TypeVar("T")


def bounded(
    call: Callable[[], T],
    timeout_s: float,
    *,
    discard: Callable[[T], None],
    patience_s: float | None = None,
    impatient: Callable[[], None] | None = None,
) -> T:
    """Run ``call`` in a daemon thread; raise ``TimeoutError`` after ``timeout_s``.

    The SDK's C calls have no timeout of their own in 0.6 (a controller that accepts TCP and never
    answers blocks ``load`` for ever). A late result is handed to ``discard`` (close it). When
    ``call`` has not answered after ``patience_s``, ``impatient()`` runs once in the caller's
    thread (the load asks the controller why): what it raises ends the wait (unless ``call``
    answered meanwhile), else the wait goes on until ``timeout_s``.
    """
    lock = threading.Lock()
    done = threading.Event()
    box: dict[str, Any] = {"abandoned": False}

    def run() -> None:
        try:
            value = call()
        except BaseException as exc:
            with lock:
                box["error"] = exc
                done.set()
            return
        with lock:
            if box["abandoned"]:
                discard(value)
            else:
                box["value"] = value
            done.set()

    threading.Thread(target=run, name="ziti-bounded", daemon=True).start()
    started = time.monotonic()
    wait_first = impatient is not None and patience_s is not None and patience_s < timeout_s
    if wait_first and impatient is not None and not done.wait(patience_s):
        try:
            impatient()
        except BaseException:
            with lock:
                if not done.is_set():
                    box["abandoned"] = True
                    raise
    done.wait(max(0.0, timeout_s - (time.monotonic() - started)))
    with lock:
        if not done.is_set():
            box["abandoned"] = True
            raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


class DialTransport(PoolTransport):
    """An httpx transport whose connections are opened by ``dial((host, port))``.

    A failed dial (any exception, not only ``OSError``: the OpenZiti SDK raises bare ``Exception``
    and ``TypeError``) is passed to ``name_failure(addr, exc, timeout_s)`` and the exception it
    returns is raised, unchanged, out of ``httpx.Client.send`` (httpx only translates httpcore's
    own exceptions). Failures on an established connection are httpx's ``ReadError`` & co.
    Every connect, read and write is bounded by the nearest overall deadline too
    (``httpio.PoolTransport``).
    """

    def __init__(
        self,
        dial: Dial,
        *,
        name_failure: NameFailure,
        connect_timeout_s: float = 15.0,
        max_connections: int = 10,
    ) -> None:
        backend = _DialBackend(dial, name_failure, connect_timeout_s)
        super().__init__(backend, max_connections=max_connections)


class _DialBackend(httpcore.NetworkBackend):
    def __init__(
        self,
        dial: Dial,
        name_failure: NameFailure,
        connect_timeout_s: float,
    ) -> None:
        self._dial = dial
        self._name_failure = name_failure
        self._connect_timeout_s = connect_timeout_s

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addr = (host, port)
        timeout_s = timeout if timeout is not None else self._connect_timeout_s
        try:
            sock = bounded(lambda: self._dial(addr), timeout_s, discard=_close)
        except Exception as exc:  # the SDK raises bare Exception / TypeError, not only OSError
            raise self._name_failure(addr, exc, timeout_s) from exc
        for option in socket_options or ():
            with contextlib.suppress(OSError):  # a Ziti socket is no TCP socket
                sock.setsockopt(*option)
        return _SocketStream(sock)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("the Ziti transport dials host:port, not unix sockets")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _close(sock: socket.socket) -> None:
    sock.close()


class _SocketStream(httpcore.NetworkStream):
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            self._sock.settimeout(timeout)
            return self._sock.recv(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(exc) from exc
        except OSError as exc:
            raise httpcore.ReadError(exc) from exc

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(exc) from exc
        except OSError as exc:
            raise httpcore.WriteError(exc) from exc

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        try:
            self._sock.settimeout(timeout)
            tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(exc) from exc
        except OSError as exc:
            raise httpcore.ConnectError(exc) from exc
        return _SocketStream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._sock if isinstance(self._sock, ssl.SSLSocket) else None
        if info == "socket":
            return self._sock
        if info == "is_readable":  # an idle pooled connection the server closed
            if self._sock.fileno() < 0:
                return True
            poller = select.poll()
            poller.register(self._sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        return None
