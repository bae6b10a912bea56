"""The fake OpenBao's KV v2 store: versions per path, soft-delete and destroy, on a Clock."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

from monky_deployd_testkit.fakes.bao_tokens import rfc3339
from monky_deployd_testkit.fakes.clock import Clock

# sic: OpenBao quotes an empty string, whatever was sent
BAD_VERSION = (
    'Field validation failed: error converting input for field "version": '
    "'' cannot parse value as 'int': strconv.ParseInt: invalid syntax"
)


@dataclass
class Version:
    data: dict[str, Any]
    created: float
    deleted: float | None = None
    destroyed: bool = False

    @property
    def gone(self) -> bool:
        return self.destroyed or self.deleted is not None


class KvStore:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._kv: dict[str, list[Version]] = {}

    def put(self, path: str, data: dict[str, Any]) -> int:
        """A new version at ``path``; its number."""
        with self._lock:
            versions = self._kv.setdefault(path.strip("/"), [])
            versions.append(Version(copy.deepcopy(data), self.clock.now()))
            return len(versions)

    def delete_all(self, path: str) -> None:
        with self._lock:
            self._kv.pop(path.strip("/"), None)

    def soft_delete(self, path: str) -> None:
        """Soft-delete the current version; OpenBao leaves a destroyed one as it is."""
        with self._lock:
            current = self._kv[path.strip("/")][-1]
            if not current.destroyed and current.deleted is None:
                current.deleted = self.clock.now()

    def destroy(self, path: str, versions: list[int]) -> None:
        with self._lock:
            for number in versions:
                self._kv[path.strip("/")][number - 1].destroyed = True

    def read(self, path: str, wanted: str) -> tuple[int, dict[str, Any] | None]:
        """(status, ``data`` of the envelope) as OpenBao answers ``GET <mount>/data/<path>``:
        200 with the version; 404 with the envelope for a deleted or destroyed version; 404 and
        None for a path or version that does not exist; 400 and None for a bad ``version``."""
        with self._lock:
            versions = list(self._kv.get(path.strip("/"), []))
        if not versions:
            return 404, None
        try:
            number = int(wanted) or len(versions)
        except ValueError:
            return 400, None
        if not 1 <= number <= len(versions):
            return 404, None
        version = versions[number - 1]
        data = {
            "data": None if version.gone else copy.deepcopy(version.data),
            "metadata": {
                "created_time": rfc3339(version.created),
                "custom_metadata": None,
                "deletion_time": "" if version.deleted is None else rfc3339(version.deleted),
                "destroyed": version.destroyed,
                "version": number,
            },
        }
        return (404 if version.gone else 200), data
