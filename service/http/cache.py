"""The result cache: optimize responses keyed by a hash of the canonical request.

Key: the request's `id` (service/optimizer/request_key.py), so a hit answers with the id the request would
have been given anyway.

Storage. Embedded SQLite (WAL, busy timeout, one short connection per operation so threads and
worker processes share one file) or Redis (`OPTU_CACHE_URL=redis://...`) shared by replicas.
A response cut short by its time limit is stored apart (never answered as a hit) so that its
report can still be fetched. Each entry is the response's JSON plus its sha256; an entry that does
not parse or whose checksum does not match is dropped and answered as a miss, so the request is
recomputed and stored again. A failing cache (disk full, Redis down) degrades to "miss, not
stored" and never fails a request.
"""
from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

from service.http.settings import Settings
from validation.response_json import ResponseJSON

log = logging.getLogger("optu.cache")

BUSY_TIMEOUT_S = 10.0  # how long a writer waits for another process's write lock
REDIS_PREFIX = "optu:result:"
REDIS_TIMEOUT_S = 2.0
STOPGAP_PREFIX = "stopgap:"  # a time-limited response: reportable, never served as a hit


class CacheObserver(Protocol):
    """What the cache reports (implemented by service.http.metrics.Metrics)."""

    def cache_lookup(self, hit: bool) -> None: ...

    def optimized(self, response: ResponseJSON) -> None: ...


def _checksum(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


class ResultCache:
    """Checksummed get/put of optimize responses over a backend's raw `_read/_write/_drop`."""

    def __init__(self, observer: CacheObserver | None = None):
        self.observer = observer

    @classmethod
    def from_settings(cls, settings: Settings, observer: CacheObserver | None = None) -> ResultCache:
        if settings.cache_url:
            import redis  # only deployments that share a Redis need the client loaded

            # Bounded waits: an unreachable Redis must cost a miss, not hang the request.
            client = redis.Redis.from_url(settings.cache_url, socket_timeout=REDIS_TIMEOUT_S,
                                          socket_connect_timeout=REDIS_TIMEOUT_S)
            return RedisCache(client, observer)
        return SQLiteCache(Path(settings.cache_dir), observer)

    def get(self, key: str) -> ResponseJSON | None:
        """The stored response marked `cache: "hit"`, or None (absent, corrupt, or cache down)."""
        response = self._load(key)
        if self.observer is not None:
            self.observer.cache_lookup(response is not None)
        return None if response is None else response | {"cache": "hit"}

    def put(self, key: str, response: ResponseJSON) -> ResponseJSON:
        """Store a freshly computed response; returns it unchanged so a route can `return put(...)`."""
        if self.observer is not None:
            self.observer.optimized(response)
        # A deadline's stopgap is kept apart from the answers `get` serves, so a retry with more time
        # computes afresh while the stopgap stays reportable by its id.
        stopgap = response.get("report", {}).get("egraph", {}).get("stop_reason") == "time_limit"
        try:
            payload = json.dumps(response, sort_keys=True)
            self._write(STOPGAP_PREFIX + key if stopgap else key, payload, _checksum(payload))
        except Exception as exc:  # a result that cannot be cached is still a good answer
            log.warning("cache write failed: %s: %s", type(exc).__name__, exc)
        return response

    def stored(self, key: str) -> ResponseJSON | None:
        """Any response this cache holds under `key`, a deadline's stopgap included (for reports:
        every result the server returned stays reportable by its id); None when there is none."""
        return self._load(key) or self._load(STOPGAP_PREFIX + key)

    def _load(self, key: str) -> ResponseJSON | None:
        try:
            entry = self._read(key)
        except Exception as exc:  # a cache outage is a miss, not an error for the client
            log.warning("cache read failed: %s: %s", type(exc).__name__, exc)
            return None
        if entry is None:
            return None
        payload, checksum = entry
        try:
            if _checksum(payload) != checksum:
                raise ValueError("checksum mismatch")
            response = json.loads(payload)
            if not isinstance(response, dict):
                raise ValueError("not a JSON object")
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("corrupt cache entry %s dropped: %s", key, exc)
            try:
                self._drop(key, checksum)
            except Exception as drop_exc:
                log.warning("dropping corrupt entry failed: %s", drop_exc)
            return None
        return response

    def _read(self, key: str) -> tuple[str, str] | None:
        raise NotImplementedError

    def _write(self, key: str, payload: str, checksum: str) -> None:
        raise NotImplementedError

    def _drop(self, key: str, checksum: str) -> None:
        raise NotImplementedError


class SQLiteCache(ResultCache):
    """One SQLite file under `directory`; WAL lets readers proceed while one process writes."""

    def __init__(self, directory: Path, observer: CacheObserver | None = None):
        super().__init__(observer)
        self.path = directory / "results.sqlite3"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # The default directory sits in the working tree; keep its files out of version control.
            ignore = directory / ".gitignore"
            if not ignore.exists():
                ignore.write_text("*\n")
            with closing(self._connect()) as conn, conn:
                conn.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file itself
                conn.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, "
                             "payload TEXT NOT NULL, checksum TEXT NOT NULL)")
        except (OSError, sqlite3.Error) as exc:  # e.g. a read-only file system: serve, uncached
            log.warning("result cache unavailable at %s (%s: %s): every request is computed",
                        directory, type(exc).__name__, exc)

    def _connect(self) -> sqlite3.Connection:
        # A connection per operation: safe from any thread, and nothing stale survives a fork.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        return conn

    def _read(self, key: str) -> tuple[str, str] | None:
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT payload, checksum FROM results WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], row[1])

    def _write(self, key: str, payload: str, checksum: str) -> None:
        with closing(self._connect()) as conn, conn:
            conn.execute("INSERT OR REPLACE INTO results (key, payload, checksum) VALUES (?, ?, ?)",
                         (key, payload, checksum))

    def _drop(self, key: str, checksum: str) -> None:
        # Only the entry found corrupt: another process may have stored a good one meanwhile.
        with closing(self._connect()) as conn, conn:
            conn.execute("DELETE FROM results WHERE key = ? AND checksum IS ?", (key, checksum))


class RedisCache(ResultCache):
    """A Redis hash per entry (`payload`, `checksum`) so replicas share results."""

    def __init__(self, client: Any, observer: CacheObserver | None = None):
        super().__init__(observer)
        self.client = client

    def _read(self, key: str) -> tuple[str, str] | None:
        payload, checksum = self.client.hmget(REDIS_PREFIX + key, "payload", "checksum")
        if payload is None:
            return None
        return _text(payload), _text(checksum)

    def _write(self, key: str, payload: str, checksum: str) -> None:
        self.client.hset(REDIS_PREFIX + key, mapping={"payload": payload, "checksum": checksum})

    def _drop(self, key: str, checksum: str) -> None:
        # Unconditional: a good entry stored meanwhile is merely recomputed once more.
        self.client.delete(REDIS_PREFIX + key)


def _text(value: Any) -> str:
    """Redis answers bytes unless the client decodes; a checksum that is absent compares unequal."""
    if value is None:
        return ""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
