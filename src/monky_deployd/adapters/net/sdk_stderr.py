"""The OpenZiti C SDK's own log lines, held back so that the agent's error line comes first.

libziti writes its log lines (``[  0.005]   ERROR ziti-sdk:ziti_ctrl.c:152 ctrl_resp_cb() ...``)
straight to file descriptor 2 from its own loop thread. Under systemd stdout and stderr are the
same journal stream, so a failing identity load put the SDK's ERROR lines before the agent's line
naming the fault. Setting the SDK's log level would lose its words; instead:

- ``hold()`` (called before ``load`` and before each dial) points fd 2 at a pipe, once per process
  (the original stderr is kept as a duplicate), and keeps every line written from then on;
- ``release()`` (the call succeeded) writes the kept lines to the real stderr and lets later lines
  pass straight through;
- ``take()`` (the call failed) hands the kept lines to the caller, which carries them in its
  ``DeployError.detail``; fd 2 stays held, and whatever else the SDK says is written to the real
  stderr when the process exits (atexit), after the agent's error and summary lines.

The pipe is drained by a daemon thread and by ``take()`` itself (non-blocking reads under one lock),
so a line the SDK wrote before the failing call returned is always in what ``take()`` returns.
Lost on a crash or SIGKILL: lines still held (the agent's error line is then not written either).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import select
import threading

MAX_DETAIL_CHARS = 2000  # the SDK repeats itself; the first lines name the fault


class SdkStderr:
    """fd 2 redirected through a pipe: pass lines through, or hold them (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._holding = False
        self._held: list[bytes] = []
        self._partial = b""
        self._read_fd = -1
        self._write_fd = -1
        self._real_fd = -1

    # -- the caller's side ------------------------------------------------------------------------

    def hold(self, *, start: bool = True) -> None:
        """Keep every line written to fd 2 from now on. The redirection starts at the first call
        (the identity load); with ``start=False`` (a dial) nothing happens before that."""
        with self._lock:
            if not self._started:
                if not start:
                    return
                self._start()
            self._drain()
            self._holding = True

    def release(self) -> None:
        """Write the kept lines to the real stderr; later lines pass straight through."""
        with self._lock:
            if not self._started:
                return
            self._drain()
            self._emit(self._held)
            self._held = []
            self._holding = False

    def take(self) -> str:
        """The lines kept since ``hold()``, one line joined by `` | ``; "" when not holding.
        fd 2 stays held: later lines reach the real stderr at exit."""
        with self._lock:
            if not self._holding:
                return ""
            self._drain()
            lines, self._held = self._held, []
            if self._partial:
                lines.append(self._partial)
                self._partial = b""
        text = b"".join(lines).decode("utf-8", errors="replace")
        text = " | ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
        if len(text) > MAX_DETAIL_CHARS:
            text = text[:MAX_DETAIL_CHARS] + " [...]"
        return text

    def finish(self) -> None:
        """Give fd 2 back and write whatever is still held to it (atexit)."""
        with self._lock:
            if not self._started:
                return
            self._drain()
            os.dup2(self._real_fd, 2)
            os.close(self._write_fd)
            self._emit([*self._held, self._partial])
            self._held, self._partial = [], b""
            self._holding = False
            self._started = False

    # -- inside ---------------------------------------------------------------------------------

    def _start(self) -> None:
        self._real_fd = os.dup(2)
        self._read_fd, self._write_fd = os.pipe()
        flags = fcntl.fcntl(self._read_fd, fcntl.F_GETFL)
        fcntl.fcntl(self._read_fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        os.dup2(self._write_fd, 2)
        self._started = True
        threading.Thread(target=self._pump, name="ziti-sdk-stderr", daemon=True).start()
        atexit.register(self.finish)

    def _pump(self) -> None:
        read_fd = self._read_fd
        while True:
            try:
                select.select([read_fd], [], [])
            except (OSError, ValueError):
                return
            with self._lock:
                if not self._started:
                    return
                if self._drain():
                    return

    def _drain(self) -> bool:
        """Read what the pipe holds (lock held); True at end of file."""
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            data = self._partial + chunk
            *lines, self._partial = data.split(b"\n")
            complete = [line + b"\n" for line in lines]
            if self._holding:
                self._held.extend(complete)
            else:
                self._emit(complete)

    def _emit(self, chunks: list[bytes]) -> None:
        data = b"".join(chunks)
        while data:
            try:
                data = data[os.write(self._real_fd, data) :]
            except OSError:
                return


SDK_STDERR = SdkStderr()
