"""A request's id (the response id and the cache key): internal names do not change it, the
interface, options and profile do; the code fingerprint covers every package's source."""
from __future__ import annotations

import copy
from pathlib import Path

from wire_examples import MATMUL_SCALE as PROGRAM
from wire_examples import renamed

from service.optimizer.request_key import canonical_request_id, source_files

REPO_ROOT = Path(__file__).resolve().parents[3]


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


def test_code_fingerprint_covers_every_package_including_nested_ones():
    covered = {path.relative_to(REPO_ROOT).as_posix() for path in source_files()}
    for path in ("wire/format.py", "rewrites/algebra.py", "costmodel/profiles/optu-v1.toml", "lowering/emit.py",
                 "service/optimizer/pipeline.py", "service/http/app.py", "service/client.py"):
        assert path in covered
