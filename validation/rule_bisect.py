"""Delta debugging (Zeller and Hildebrandt's ddmin) over a set of rule names: a smallest subset whose
application still makes validation fail, every one of its rules needed (1-minimal)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple


class NotFailing(ValueError):
    """The whole set does not fail: there is nothing to minimize."""


class Bisected(NamedTuple):
    rules: list[str]  # they make validation fail
    tried: int  # distinct subsets tried
    minimal: bool  # every rule needed; False when time ran out first (a failing set, maybe larger)


class _OutOfTime(Exception):
    pass


def minimal_failing(rules: Sequence[str], fails: Callable[[frozenset[str]], bool],
                    out_of_time: Callable[[], bool] = lambda: False) -> Bisected:
    """A 1-minimal subset of `rules` on which `fails` holds (removing any one rule makes it pass;
    empty when it fails with no rule at all). `fails(subset)` runs the optimizer with only `subset`
    of the rules and reports whether validation failed; each subset is tried at most once. Once
    `out_of_time()` says so (asked before each subset after the first), the smallest failing
    subset found so far is the answer, marked not minimal."""
    tried: dict[frozenset[str], bool] = {}

    def test(subset: Sequence[str]) -> bool:
        key = frozenset(subset)
        if key not in tried:
            if tried and out_of_time():
                raise _OutOfTime
            tried[key] = fails(key)
        return tried[key]

    current = sorted(set(rules))
    if not test(current):
        raise NotFailing(f"validation does not fail with all {len(current)} rules applied")
    try:
        if test([]):  # the failure needs no rule (fusion or lowering): no subset of rules is to blame
            return Bisected([], len(tried), True)
        parts = 2
        while len(current) >= 2:  # `current` fails throughout
            chunks = _split(current, parts)
            for chunk in chunks:  # a part alone fails: continue with it
                if test(chunk):
                    current, parts = chunk, 2
                    break
            else:
                for chunk in chunks:  # a part's complement fails: drop the part
                    complement = [r for r in current if r not in chunk]
                    if len(chunks) > 2 and test(complement):
                        current, parts = complement, max(parts - 1, 2)
                        break
                else:
                    if parts >= len(current):
                        break
                    parts = min(len(current), 2 * parts)
    except _OutOfTime:
        return Bisected(current, len(tried), False)
    return Bisected(current, len(tried), True)


def _split(items: list[str], parts: int) -> list[list[str]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]
