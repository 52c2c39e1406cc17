"""A request's id (the response id and the cache key): internal names do not change it, the
interface, options and profile do; the code fingerprint covers every package's source."""
from __future__ import annotations

import copy
from pathlib import Path

from wire_examples import MATMUL_SCALE as PROGRAM
from wire_examples import renamed

from costmodel.profile import DEFAULT_PROFILE, load_profile
from service.optimizer.options import DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S, OptimizeOptions
from service.optimizer.request_key import canonical_request_id, source_files

REPO_ROOT = Path(__file__).resolve().parents[3]


HARDWARE, OPTIONS = load_profile(DEFAULT_PROFILE), OptimizeOptions().resolved()


def test_canonical_id_ignores_internal_names_only():
    key = canonical_request_id(PROGRAM, HARDWARE, OPTIONS)
    assert canonical_request_id(renamed(PROGRAM, "d", "tmp0"), HARDWARE, OPTIONS) == key
    given = OptimizeOptions(time_limit_s=DEFAULT_TIME_LIMIT_S, node_limit=DEFAULT_NODE_LIMIT).resolved()
    assert canonical_request_id(PROGRAM, load_profile("optu-v1"), given) == key  # the defaults, named
    # Interface names and input order are part of the request: the answer must match them.
    assert canonical_request_id(renamed(PROGRAM, "a", "x"), HARDWARE, OPTIONS) != key
    assert canonical_request_id(renamed(PROGRAM, "e", "y"), HARDWARE, OPTIONS) != key
    swapped = copy.deepcopy(PROGRAM) | {"inputs": PROGRAM["inputs"][::-1]}
    assert canonical_request_id(swapped, HARDWARE, OPTIONS) != key
    assert canonical_request_id(PROGRAM, HARDWARE, OptimizeOptions(fp_mode="exact").resolved()) != key
    assert canonical_request_id(PROGRAM, load_profile("cpu-host"), OPTIONS) != key


def test_canonical_id_renames_nested_bodies_in_their_own_scope():
    body = renamed(PROGRAM, "d", "inner")
    outer = copy.deepcopy(PROGRAM)
    outer["eqns"][1]["params"] = {"branches": [{"program": body}]}
    other = copy.deepcopy(outer)
    other["eqns"][1]["params"] = {"branches": [{"program": renamed(body, "inner", "z")}]}
    assert canonical_request_id(outer, HARDWARE, OPTIONS) == canonical_request_id(other, HARDWARE, OPTIONS)
    changed = copy.deepcopy(outer)
    changed["eqns"][1]["params"]["branches"][0]["program"]["eqns"][1]["op"] = "add"
    assert canonical_request_id(changed, HARDWARE, OPTIONS) != canonical_request_id(outer, HARDWARE, OPTIONS)


def test_code_fingerprint_covers_every_package_including_nested_ones():
    covered = {path.relative_to(REPO_ROOT).as_posix() for path in source_files()}
    for path in ("wire/format.py", "rewrites/algebra.py", "costmodel/profiles/optu-v1.toml", "lowering/emit.py",
                 "service/optimizer/pipeline.py", "service/http/app.py", "service/client.py"):
        assert path in covered
