"""Fused kernels spliced into a program: the equations a realized kernel stands for replaced by
the ones that compute it (one Pallas call, with what it needs around it), and every kernel's
equation indices renumbered to match."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from lowering.kernels import Kernel
from wire.json_types import Eqn, Program
from wire.primitives import live_equations


def splice(program: Program, kernels: list[Kernel], replaced: dict[int, list[Eqn]], owner: dict[int, Kernel],
           dropped: Collection[int] = ()) -> tuple[Program, list[Kernel]]:
    """`program` with equation `i` replaced by `replaced[i]` (the equations of `owner[i]`'s
    realized kernel), those of `dropped` removed, and any equation no result depends on any more
    left out; and `kernels` (copies: the caller's stay as they are), their equation indices and
    ops renumbered, each realized kernel holding the equations added for it."""
    spliced, origin = [], []
    for index, eqn in enumerate(program["eqns"]):
        if index not in dropped:
            new = replaced.get(index, [eqn])
            spliced += new
            origin += [index] * len(new)
    live = live_equations(spliced, program["outputs"])
    renumbered: dict[int, list[int]] = {}
    for position, index in enumerate(live):
        renumbered.setdefault(origin[index], []).append(position)
    copies = []
    for kernel in kernels:
        indices = [n for i in kernel.eqns for n in renumbered.get(i, []) if i not in owner or owner[i] is kernel]
        copies.append(replace(kernel, eqns=indices, ops=[spliced[live[n]]["op"] for n in indices]))
    return {**program, "eqns": [spliced[i] for i in live]}, copies
