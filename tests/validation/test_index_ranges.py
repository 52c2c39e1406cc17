"""Integer inputs used as indices are drawn over the range their uses accept: every row of the
table an embedding reads (so a program wrong only past the first rows fails), never past its end."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from validation.index_ranges import index_bounds
from validation.inputs import SMALL_INTEGERS, random_inputs
from validation.validate import validate
from wire.capture import capture

TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)
IDS = np.zeros((64,), np.int32)


def _lookup(reads_only_first_rows: bool = False):
    def fn(table, ids, start, count):
        rows = jnp.minimum(ids, 3) if reads_only_first_rows else ids
        window = jax.lax.dynamic_slice_in_dim(table, start, 2, 0)
        return table[rows] * 2.0, window.sum() + count.sum()
    return capture(fn, TABLE, IDS, np.int32(0), np.zeros((3,), np.int32))


def test_an_index_is_bounded_by_its_table_and_a_start_by_the_room_its_slice_needs():
    program = _lookup()
    names = [s["name"] for s in program["inputs"]]
    assert index_bounds(program) == {names[1]: 10, names[2]: 9}  # count is not an index


def test_indices_are_drawn_over_the_whole_table_and_other_integers_small():
    program = _lookup()
    _, ids, start, count = random_inputs(program, 0)
    assert ids.min() >= 0 and ids.max() == 9 and len(np.unique(ids)) == 10  # 64 draws reach every row
    assert 0 <= start < 9
    assert count.max() < SMALL_INTEGERS


def test_a_program_wrong_only_past_the_first_rows_of_a_table_fails_validation():
    assert validate(_lookup(), _lookup(reads_only_first_rows=True))["status"] == "failed"
    assert validate(_lookup(), _lookup())["status"] == "identical"


def test_an_index_shifted_by_arithmetic_is_not_bounded_by_the_table():
    # ids + 5 reads rows 5..: the table's bound says nothing about ids itself
    program = capture(lambda table, ids: table[ids + 5], TABLE, IDS)
    assert index_bounds(program) == {}
