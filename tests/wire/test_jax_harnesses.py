"""JAX's own primitive test harnesses (every group, two cases each, spread over the group) through
capture -> optimize -> run: each case either comes back validated and computing what JAX computes,
or is refused with an error naming the primitive and the reason, which the HTTP API answers as a
422. Nothing else: no crash, no other exception, no wrong answer. The refused primitives are the
list in docs/how-it-works.md: a newly refused one fails here."""
from __future__ import annotations

import collections
import re
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from jax._src.internal_test_util import test_harnesses

from service.http.api_models import error_status
from service.optimizer.pipeline import optimize
from wire.capture import capture
from wire.execute import program_to_callable
from wire.format import WireError

pytestmark = pytest.mark.slow  # about 260 programs through the whole pipeline

PER_GROUP = 2
# The primitives docs/how-it-works.md says are refused, each with the words it names it by.
REFUSED = {"random_seed": "typed PRNG keys", "reduce": "`reduce` with a Python computation",
           "select_and_scatter_add": "`select_and_scatter_add`", "select_and_gather_add": "`select_and_gather_add`",
           "iota_2x32_shape": "`iota_2x32_shape`"}
HOW_IT_WORKS = Path(__file__).resolve().parents[2] / "docs" / "how-it-works.md"
GROUPS: dict[str, list] = collections.defaultdict(list)
for _harness in test_harnesses.all_harnesses:
    GROUPS[_harness.group_name].append(_harness)


def sample(group: str) -> list:
    cases = GROUPS[group]
    return cases[::max(1, len(cases) // PER_GROUP)][:PER_GROUP]


def reference(harness, args):
    """What JAX computes, or None where JAX itself cannot run the case on this backend (e.g. a
    bfloat16 decomposition the CPU has no kernel for): there is nothing to compare against."""
    try:
        return [np.asarray(x) for x in jax.tree.leaves(jax.jit(harness.dyn_fun)(*args))]
    except (NotImplementedError, TypeError, ValueError) as err:
        if "Unsupported dtype" in str(err) or "not implemented" in str(err).lower():
            return None
        raise


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(want.dtype, np.inexact):
        np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=1e-3, atol=1e-3,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_jax_primitive_harness_round_trips_validated_or_is_refused_naming_the_primitive(group):
    for harness in sample(group):
        args = harness.dyn_args_maker(np.random.RandomState(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = reference(harness, args)
        if want is None:
            continue
        try:
            response = optimize(capture(harness.dyn_fun, *args), None, {"time_limit_s": 5})
        except WireError as err:
            named = re.findall(r"primitive '([^']+)'", str(err))
            assert named, f"{harness.name}: {err}"
            assert set(named) <= set(REFUSED), f"{harness.name}: newly refused {named}: {err}"
            assert error_status(err)[0] == 422
            continue
        assert response["validation"]["status"] in ("passed", "identical", "inconclusive"), \
            (harness.name, response["validation"])
        got = program_to_callable(response["program"])(*jax.tree.leaves(args))
        assert len(got) == len(want), harness.name
        for have, expected in zip(got, want):
            assert_same(np.asarray(have), expected)


def test_the_docs_name_every_refused_primitive():
    refused = re.search(r"Refused today:(.*?)\.\n", HOW_IT_WORKS.read_text(), re.S).group(1)
    assert [words for words in REFUSED.values() if words not in " ".join(refused.split())] == []
