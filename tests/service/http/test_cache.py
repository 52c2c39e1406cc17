"""The result cache: hits through the app, corrupt entries recomputed, the Redis backend on the
machine's Redis (shared by two app replicas), and two processes sharing one SQLite directory."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from wire_examples import MATMUL_SCALE as PROGRAM
from wire_examples import renamed

from bench.models.zoo import ZOO
from service.http.app import create_app
from service.http.cache import RedisCache, ResultCache, SQLiteCache
from service.http.settings import Settings
from wire.capture import capture

REPO_ROOT = Path(__file__).resolve().parents[3]



@pytest.fixture
def client(tmp_path):
    return TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path))), raise_server_exceptions=False)


def optimize(client, program=PROGRAM, **body) -> dict:
    r = client.post("/v1/optimize", json={"program": program, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_second_request_is_a_hit_with_the_same_program(client):
    first = optimize(client)
    second = optimize(client)
    assert (first["cache"], second["cache"]) == ("miss", "hit")
    assert second["program"] == first["program"] and second["id"] == first["id"]
    assert second["validation"] == first["validation"]


def test_renamed_internal_variables_hit_other_changes_miss(client):
    first = optimize(client)
    hit = optimize(client, renamed(PROGRAM, "d", "scratch"))
    assert hit["cache"] == "hit" and hit["program"] == first["program"]
    assert optimize(client, renamed(PROGRAM, "a", "x"))["cache"] == "miss"  # interface name
    assert optimize(client, options={"fp_mode": "exact"})["cache"] == "miss"
    assert optimize(client, hardware="cpu-host")["cache"] == "miss"


@pytest.mark.parametrize("garbage", ["{not json", json.dumps({"program": "tampered"})])
def test_corrupt_entry_is_dropped_and_recomputed(client, tmp_path, garbage):
    first = optimize(client)
    with sqlite3.connect(tmp_path / "results.sqlite3") as db:  # bad JSON, or a checksum mismatch
        assert db.execute("UPDATE results SET payload = ?", (garbage,)).rowcount == 1
    again = optimize(client)
    assert again["cache"] == "miss" and again["program"] == first["program"]
    assert optimize(client)["cache"] == "hit"  # the recomputed result was stored again


def test_sqlite_put_get_and_corrupt_row_removed(tmp_path):
    cache = SQLiteCache(tmp_path / "nested" / "dir")
    assert cache.get("k") is None
    assert cache.put("k", {"cache": "miss", "x": [1.5]}) == {"cache": "miss", "x": [1.5]}
    assert cache.get("k") == {"cache": "hit", "x": [1.5]}
    with sqlite3.connect(cache.path) as db:
        db.execute("UPDATE results SET checksum = 'bad'")
    assert cache.get("k") is None
    with sqlite3.connect(cache.path) as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone() == (0,)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_unwritable_cache_degrades_to_a_miss(tmp_path):
    cache = SQLiteCache(tmp_path)
    cache.path.unlink()
    cache.path.mkdir()  # a directory where the database should be: every operation fails
    assert cache.put("k", {"v": 1}) == {"v": 1}
    assert cache.get("k") is None


def test_a_cache_directory_that_cannot_be_created_serves_uncached(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the directory should go, as a read-only file system refuses it
    cache = SQLiteCache(blocker / "cache")
    assert cache.put("k", {"v": 1}) == {"v": 1}
    assert cache.get("k") is None


def test_redis_backend_round_trip_and_corruption(redis_url):
    cache = ResultCache.from_settings(Settings(cache_url=redis_url))
    assert isinstance(cache, RedisCache)
    cache.put("k", {"cache": "miss", "program": {"eqns": []}})
    assert cache.get("k") == {"cache": "hit", "program": {"eqns": []}}
    redis.Redis.from_url(redis_url).hset("optu:result:k", mapping={"payload": b"\xff garbage"})
    assert cache.get("k") is None  # detected and dropped
    assert not redis.Redis.from_url(redis_url).exists("optu:result:k")


def test_replicas_share_results_through_redis(redis_url):
    first = TestClient(create_app(Settings(workers=0, cache_url=redis_url)))
    second = TestClient(create_app(Settings(workers=0, cache_url=redis_url)))
    fn, args = ZOO["mlp2"]()
    body = {"program": capture(fn, *args), "options": {"node_limit": 12_345}}
    assert first.post("/v1/optimize", json=body).json()["cache"] == "miss"
    assert second.post("/v1/optimize", json=body).json()["cache"] == "hit"


def test_from_settings_picks_the_backend(tmp_path):
    assert isinstance(ResultCache.from_settings(Settings(cache_dir=str(tmp_path))), SQLiteCache)
    redis_cache = ResultCache.from_settings(Settings(cache_url="redis://127.0.0.1:1/0"))
    assert isinstance(redis_cache, RedisCache)
    assert redis_cache.get("k") is None  # no server there: a miss, not an error


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from service.http.cache import SQLiteCache
    cache = SQLiteCache(Path(sys.argv[1]))
    for i in range(300):
        cache.put(f"k{i % 50}", {"writer": sys.argv[2], "i": i, "pad": "x" * 2000})
        got = cache.get(f"k{(i * 7) % 50}")
        assert got is None or got["cache"] == "hit", got
    print("ok")
""")


@pytest.mark.integration
def test_two_processes_share_one_cache_dir(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(n)], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "ok", err
        assert "failed" not in err, err  # the cache logs, rather than raises, its own errors
    cache = SQLiteCache(tmp_path)
    assert all(cache.get(f"k{i}")["writer"] in ("0", "1") for i in range(50))
