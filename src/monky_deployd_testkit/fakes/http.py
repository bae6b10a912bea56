"""The one HTTP server of the test kit: a threaded loopback server, request/response records,
JSON helpers and the fault switches every fake offers (fail_next, garbage, slow_s, and on the
socket only: drip_s, a response sent one byte at a time; endless, a body that never ends).

Subclasses implement `route(req) -> Response` (and `record(req)` to keep what they saw). All
state lives behind `self.lock`. The same handling runs without a socket: `handle(request)`
answers an `httpx.Request` in-process, and `mock_transport(*servers)` is an
`httpx.MockTransport` that serves a client from started fakes by port (long simulations; a
stopped fake refuses the connection as its socket would). httpx timeouts do not apply there, so
a test of `slow_s` or of a dropped connection needs the real socket.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import httpx

JSON = "application/json"
GARBAGE_BODY = b"<html><body>502 upstream hiccup</body></html> {not json"


@dataclass
class Request:
    method: str
    path: str  # without the query string
    query: dict[str, list[str]]
    headers: Message  # the message's headers (case-insensitive lookup)
    body: bytes
    target: str = ""  # the request-target as sent (path and query string)
    peer: tuple[str, int] | None = None  # the client's address (None without a socket)

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def json(self) -> Any:
        """The body parsed as JSON; raises ValueError when it is not JSON."""
        if not self.body:
            return None
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, obj: Any, headers: Mapping[str, str] | None = None) -> Response:
    hdrs = {"Content-Type": JSON}
    hdrs.update(headers or {})
    return Response(status, json.dumps(obj).encode(), hdrs)


def raw_response(status: int, body: bytes, content_type: str | None = None) -> Response:
    """A body as given; Content-Type is JSON when the bytes look like JSON, else text/plain."""
    if content_type is None:
        content_type = JSON if body.lstrip()[:1] in (b"{", b"[") else "text/plain; charset=utf-8"
    return Response(status, body, {"Content-Type": content_type} if body else {})


@dataclass
class _Fault:
    status: int
    body: bytes
    path_contains: str | None
    times: int
    headers: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive like real servers; stop() closes open connections
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without TCP_NODELAY, Nagle holds the body
        # until the client's delayed ACK (~40 ms per keep-alive request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        return  # never log: request lines and headers may carry tokens

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = self._read_chunked()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
        req = Request(
            self.command,
            split.path,
            parse_qs(split.query),
            self.headers,
            body,
            self.path,
            self.client_address[:2],
        )
        try:
            resp = self.server.fake._answer(req)
        except Exception as exc:  # a bug in a fake must show up as a 500, not a hang
            resp = json_response(500, {"errors": [f"fake crashed: {type(exc).__name__}"]})
        if self.server.fake._stopping.is_set():
            self.close_connection = True
            return
        if self.server.fake.endless:
            self._send_endless()
            return
        if self.server.fake.drip_s > 0:
            self._send_dripping(resp)
            return
        self.send_response(resp.status)
        for name, value in resp.headers.items():
            self.send_header(name, value)
        if resp.status not in (204, 304):
            self.send_header("Content-Length", str(len(resp.body)))
        self.end_headers()
        if resp.status not in (204, 304) and self.command != "HEAD":
            self.wfile.write(resp.body)

    def _send_dripping(self, resp: Response) -> None:
        """The whole answer, status line included, one byte per ``drip_s``."""
        fake = self.server.fake
        head = [f"HTTP/1.1 {resp.status} Dripping"]
        head += [f"{name}: {value}" for name, value in resp.headers.items()]
        head.append(f"Content-Length: {len(resp.body)}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body
        self.close_connection = True
        for i in range(len(raw)):
            if not fake._write_or_cut(self.connection, raw[i : i + 1]):
                return
            fake.sleep(fake.drip_s)

    def _send_endless(self) -> None:
        """200, chunked, a JSON-looking body that never ends (until the client hangs up)."""
        fake = self.server.fake
        self.close_connection = True
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n"
        if not fake._write_or_cut(self.connection, head + b"1\r\n{\r\n"):
            return
        data = b'"x": "' + b"x" * (64 * 1024) + b'", '
        chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        while not fake._stopping.is_set():
            if not fake._write_or_cut(self.connection, chunk):
                return

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch
    do_LIST = _dispatch  # OpenBao's LIST verb


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], fake: LoopbackServer) -> None:
        self.fake = fake
        super().__init__(addr, _Handler)
        # a wake-up with nothing to accept must not block the serving thread in accept(): it
        # would never see shutdown() (a suite run hung in a fixture's teardown that way)
        self.socket.setblocking(False)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = self.socket.accept()
        conn.setblocking(True)  # the handler's reads and writes block, as before
        return conn, addr


class LoopbackServer:
    """A fake service on 127.0.0.1 (port 0 = a free port). Use as a context manager."""

    def __init__(self, port: int = 0) -> None:
        self.lock = threading.RLock()
        self._want_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._faults: list[_Fault] = []
        self.garbage = False
        self.slow_s = 0.0
        self.drip_s = 0.0  # > 0: every answer dribbles out one byte per drip_s
        self.endless = False  # every answer is a 200 whose body never ends
        self.bytes_dripped = 0  # bytes sent in drip/endless mode
        self.cut = 0  # drip/endless connections the client closed before the end
        self._cut_seen = threading.Condition(self.lock)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Self:
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", self._want_port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open keep-alive connection (clients see the drop)."""
        self._stopping.set()
        if self._server is None:
            return
        self._want_port = self.port  # a later start() comes back on the same port
        self._server.shutdown()
        self._server.server_close()
        with self.lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        if self._server is None:
            if self._want_port:  # stopped: the port it had (clients now get refused)
                return self._want_port
            raise RuntimeError(f"{type(self).__name__} is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- fault switches ---------------------------------------------------------------------
    def fail_next(
        self,
        status: int,
        body_bytes: bytes = b"",
        path_contains: str | None = None,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests (whose path contains `path_contains`, if given)
        with `status`, `body_bytes` and extra `headers` instead of the real answer."""
        with self.lock:
            self._faults.append(
                _Fault(status, body_bytes, path_contains, times, dict(headers or {}))
            )

    def clear_faults(self) -> None:
        with self.lock:
            self._faults.clear()
            self.garbage = False
            self.slow_s = 0.0
            self.drip_s = 0.0
            self.endless = False

    def wait_cut(self, n: int = 1, timeout: float = 30.0) -> bool:
        """Wait until the client has closed ``n`` drip/endless connections; True if it has."""
        with self._cut_seen:
            return self._cut_seen.wait_for(lambda: self.cut >= n, timeout)

    def _write_or_cut(self, conn: socket.socket, data: bytes) -> bool:
        """Send ``data``; False (counted in ``cut``) when the client has hung up."""
        try:
            conn.sendall(data)
        except OSError:
            with self._cut_seen:
                self.cut += 1
                self._cut_seen.notify_all()
            return False
        with self.lock:
            self.bytes_dripped += len(data)
        return True

    def sleep(self, seconds: float) -> None:
        """Sleep that ends early when the server stops."""
        self._stopping.wait(seconds)

    # -- internals --------------------------------------------------------------------------
    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self.lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _take_fault(self, path: str) -> _Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.path_contains is None or fault.path_contains in path:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request`` in-process, as the socket would (for ``httpx.MockTransport``)."""
        if self._server is None or self._stopping.is_set():
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        headers = Message()
        for name, value in request.headers.raw:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        target = request.url.raw_path.decode("ascii")
        split = urlsplit(target)
        req = Request(
            request.method, split.path, parse_qs(split.query), headers, request.read(), target
        )
        try:
            resp = self._answer(req)
        except Exception as exc:  # as the socket handler: a bug in a fake is a 500
            resp = json_response(500, {"errors": [f"fake crashed: {type(exc).__name__}"]})
        out = dict(resp.headers)
        body = resp.body
        if resp.status in (204, 304):
            body = b""
        else:
            out["Content-Length"] = str(len(resp.body))
            if request.method == "HEAD":
                body = b""
        return httpx.Response(resp.status, headers=out, content=body, request=request)

    def _answer(self, req: Request) -> Response:
        self.record(req)
        slow = self.slow_s
        if slow > 0:
            self.sleep(slow)
        fault = self._take_fault(req.path)
        if fault is not None:
            resp = raw_response(fault.status, fault.body)
            resp.headers.update(fault.headers)
            return resp
        if self.garbage:
            return Response(200, GARBAGE_BODY, {"Content-Type": JSON})
        return self.route(req)

    def record(self, req: Request) -> None:
        """Called for every request before faults; subclasses append to `requests`."""

    def route(self, req: Request) -> Response:
        raise NotImplementedError


def mock_transport(*servers: LoopbackServer) -> httpx.MockTransport:
    """Serve a client from these started fakes without a socket: a request goes to the fake
    whose port is the URL's (any other port is refused, as on loopback)."""
    by_port = {server.port: server for server in servers}

    def handler(request: httpx.Request) -> httpx.Response:
        server = by_port.get(request.url.port or 80)
        if server is None or request.url.host != server.host:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return server.handle(request)

    return httpx.MockTransport(handler)
