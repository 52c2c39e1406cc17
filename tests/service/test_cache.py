"""The result cache: canonical request ids, hits through the app, corrupt entries recomputed,
the Redis backend against a fake client, and two processes sharing one SQLite directory."""
from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.cache import RedisCache, ResultCache, SQLiteCache, canonical_request_id
from service.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]

PROGRAM = {
    "format": "optu.jaxpr/v1",
    "inputs": [{"name": "a", "shape": [4, 8], "dtype": "float32", "role": "activation"},
               {"name": "b", "shape": [8, 16], "dtype": "float32", "role": "weight"}],
    "consts": [],
    "eqns": [
        {"op": "dot_general", "in": ["a", "b"],
         "out": [{"name": "d", "shape": [4, 16], "dtype": "float32"}],
         "params": {"dimension_numbers": [[[1], [0]], [[], []]], "precision": None,
                    "preferred_element_type": "float32"}},
        {"op": "mul", "in": [{"lit": 0.5, "dtype": "float32"}, "d"],
         "out": [{"name": "e", "shape": [4, 16], "dtype": "float32"}], "params": {}},
    ],
    "outputs": ["e"],
}


def renamed(program: dict, old: str, new: str) -> dict:
    """`program` with variable `old` spelled `new` everywhere."""
    return json.loads(json.dumps(program).replace(f'"{old}"', f'"{new}"'))


@pytest.fixture
def client(tmp_path):
    return TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path))), raise_server_exceptions=False)


def optimize(client, program=PROGRAM, **body) -> dict:
    r = client.post("/v1/optimize", json={"program": program, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_canonical_id_ignores_internal_names_only():
    key = canonical_request_id(PROGRAM, None, None)
    assert canonical_request_id(renamed(PROGRAM, "d", "tmp0"), None, None) == key
    assert canonical_request_id(PROGRAM, "optu-v1", {}) == key  # defaults resolved before hashing
    # Interface names and input order are part of the request: the answer must match them.
    assert canonical_request_id(renamed(PROGRAM, "a", "x"), None, None) != key
    assert canonical_request_id(renamed(PROGRAM, "e", "y"), None, None) != key
    swapped = copy.deepcopy(PROGRAM) | {"inputs": PROGRAM["inputs"][::-1]}
    assert canonical_request_id(swapped, None, None) != key
    assert canonical_request_id(PROGRAM, None, {"fp_mode": "exact"}) != key
    assert canonical_request_id(PROGRAM, "cpu-host", None) != key


def test_canonical_id_renames_nested_bodies_in_their_own_scope():
    body = renamed(PROGRAM, "d", "inner")
    outer = copy.deepcopy(PROGRAM)
    outer["eqns"][1]["params"] = {"branches": [{"program": body}]}
    other = copy.deepcopy(outer)
    other["eqns"][1]["params"] = {"branches": [{"program": renamed(body, "inner", "z")}]}
    assert canonical_request_id(outer, None, None) == canonical_request_id(other, None, None)
    changed = copy.deepcopy(outer)
    changed["eqns"][1]["params"]["branches"][0]["program"]["eqns"][1]["op"] = "add"
    assert canonical_request_id(changed, None, None) != canonical_request_id(outer, None, None)


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


class FakeRedis:
    """The three hash commands RedisCache uses, over a dict (values come back as bytes)."""

    def __init__(self):
        self.data: dict[str, dict[str, bytes]] = {}

    def hset(self, key, mapping):
        self.data.setdefault(key, {}).update({k: v.encode() for k, v in mapping.items()})

    def hmget(self, key, *fields):
        return [self.data.get(key, {}).get(f) for f in fields]

    def delete(self, key):
        self.data.pop(key, None)


def test_redis_backend_round_trip_and_corruption():
    fake = FakeRedis()
    cache = RedisCache(fake)
    cache.put("k", {"cache": "miss", "program": {"eqns": []}})
    assert cache.get("k") == {"cache": "hit", "program": {"eqns": []}}
    fake.data["optu:result:k"]["payload"] = b"\xff garbage"
    assert cache.get("k") is None and "optu:result:k" not in fake.data


def test_from_settings_picks_the_backend(tmp_path):
    assert isinstance(ResultCache.from_settings(Settings(cache_dir=str(tmp_path))), SQLiteCache)
    redis_cache = ResultCache.from_settings(Settings(cache_url="redis://127.0.0.1:1/0"))
    assert isinstance(redis_cache, RedisCache)
    assert redis_cache.get("k") is None  # no server there: a miss, not an error


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from service.cache import SQLiteCache
    cache = SQLiteCache(Path(sys.argv[1]))
    for i in range(300):
        cache.put(f"k{i % 50}", {"writer": sys.argv[2], "i": i, "pad": "x" * 2000})
        got = cache.get(f"k{(i * 7) % 50}")
        assert got is None or got["cache"] == "hit", got
    print("ok")
""")


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
