"""Kernels chosen outside the e-graph, added to it as kernel e-nodes.

The conventional greedy fusion of a program (lowering/kernels.py) makes long multi-output kernels
that the fusion rules, whose bodies stay small, never enumerate. Seeded as `kernel`/`kernel_tee`
nodes (with a `tee_out` per further value they write), they become alternatives like any other:
extraction weighs them against the rules' kernels under the profile, can mix the two, and starts
from them (costmodel/warm_start.py), so the e-graph's choice is never worse than that policy.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rewrites.egglog_internals import DirectConstructors, direct_union, register
from rewrites.ingest import TERMS, LoadedProgram, encode_typed, literal_roundtrips, literal_term
from rewrites.terms import Body, Term

# A kernel body is a term as deep as its ops run: longer runs are seeded as several kernels, each
# writing what the next reads (reading a body back recurses once per level).
MAX_SEEDED_RUN = 128
BODIES = DirectConstructors(Body)  # built as declarations (rewrites/egglog_internals.py), as ingest's terms are


class BodyConstructors:
    """Body's constructors with `like` bound, so the ingest encoders build a kernel body's op
    where they build a term; an op with no Body mirror (opaque) raises AttributeError."""

    def __init__(self, like: Term):
        self.like = like

    def __getattr__(self, name: str):
        build = getattr(BODIES, name)
        return lambda *args: build(*args, self.like)


@dataclass(frozen=True)
class KernelSeed:
    """A seeded kernel by equation indices of one of the e-graph's programs (`program`: 0, or an
    alternative's number): the value its node computes, the further values it writes (in
    `tee_out` index order) and every op it computes."""

    program: int
    root: int
    tees: tuple[int, ...]
    ops: frozenset[int]


def seed_kernels(loaded: LoadedProgram, kernels: Sequence[tuple[Sequence[int], set[str]]],
                 program: int = 0) -> list[KernelSeed]:
    """Add each kernel of `loaded.programs[program]`, given as (its equations in execution order,
    the names it writes), to the e-graph. An equation with no body form (concat, opaque, a
    multi-output primitive) leaves the kernel: its value is written and read back. A kernel
    seeded before (another policy made it too) is not built again."""
    eqns, env = loaded.programs[program]["eqns"], loaded.envs[program]
    seeds: list[KernelSeed] = []
    commands = []
    for indices, writes in kernels:
        key = (program, tuple(indices), frozenset(writes))
        if key in loaded.seeded or len(indices) < 2:  # a lone op is its plain node already
            seeds += loaded.seeded.get(key, [])
            continue
        first = len(seeds)
        # An equation with no body splits the kernel: the ops before it write what it and the
        # ops after it read (a kernel that fed it and read it back would be a cycle).
        for run in _runs_with_bodies(loaded, program, indices, commands):
            mine = {i for i, _, _ in run}
            read_elsewhere = {a for i in indices if i not in mine for a in eqns[i]["in"] if isinstance(a, str)}
            written = [(i, n) for i, n, _ in run if n in writes or n in read_elsewhere]
            if len(run) < 2 or not written:
                continue  # a lone op is its plain node already
            bodies = {n: b for _, n, b in run}
            (root, root_name), tees = written[-1], written[:-1]
            root_body, tee_bodies = bodies[root_name], [bodies[n] for _, n in tees]
            if tees:
                commands.append(direct_union(env[root_name], TERMS.kernel_tee(root_body, tee_bodies)))
                commands += [direct_union(env[n], TERMS.tee_out(root_body, tee_bodies, k))
                             for k, (_, n) in enumerate(tees)]
            else:
                commands.append(direct_union(env[root_name], TERMS.kernel(root_body)))
            seeds.append(KernelSeed(program, root, tuple(i for i, _ in tees), frozenset(mine)))
        loaded.seeded[key] = seeds[first:]
    if commands:
        register(loaded.egraph, commands)
    return seeds


def _runs_with_bodies(loaded: LoadedProgram, program: int, indices: Sequence[int],
                      commands: list) -> list[list[tuple[int, str, Body]]]:
    """Maximal runs of consecutive equations that have a body form, as (index, name, body); the
    lets of bodies read twice join `commands`."""
    eqns, env, table = loaded.programs[program]["eqns"], loaded.envs[program], loaded.params
    # egglog-python sends an expression to egglog as a tree: a body read twice is let-bound, or a
    # long kernel (GEMMs back to back) would be unfolded exponentially
    reads = Counter(a for i in indices for a in eqns[i]["in"] if isinstance(a, str))
    runs: list[list[tuple[int, str, Body]]] = [[]]
    inside: dict[str, Body] = {}  # values the current run computes
    for index in indices:
        eqn = eqns[index]
        if len(runs[-1]) == MAX_SEEDED_RUN:
            runs.append([])
            inside = {}
        body = None
        if len(eqn["out"]) == 1 and all(isinstance(a, str) or literal_roundtrips(a) for a in eqn["in"]):
            args = [(inside[a] if a in inside else BODIES.arg(env[a])) if isinstance(a, str)
                    else BODIES.arg(literal_term(a)) for a in eqn["in"]]
            body = encode_typed(BodyConstructors(env[eqn["out"][0]["name"]]), eqn, args, table)
        if body is None:
            runs.append([])
            inside = {}
            continue
        if reads[eqn["out"][0]["name"]] > 1:
            action, body = loaded.fresh_let(body)
            commands.append(action)
        inside[eqn["out"][0]["name"]] = body
        runs[-1].append((index, eqn["out"][0]["name"], body))
    return [run for run in runs if run]
