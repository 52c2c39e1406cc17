"""Validation beside the fusion stages: the algebraic optimum's verdict stands for a returned program
that computes the same, and only for one; a wrong candidate is still caught."""
from __future__ import annotations

import gc
import json
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wire_examples import projections, two_regions

from service.optimizer.pipeline import optimize
from validation.background import BackgroundValidation, CollectionPause, Job
from validation.inputs import TRIALS, InputDraws, Stopped
from validation.validate import validate
from wire.capture import capture

X, W = np.ones((8, 16), np.float32), np.full((16, 16), 0.1, np.float32)


def _program():
    return capture(lambda x, w: jnp.tanh(x @ w) * 2.0, X, W)


def _renamed(program):
    """The same computation under other value names (as the fusion stage emits it)."""
    text = json.dumps(program)
    for eqn in program["eqns"]:
        for out in eqn["out"]:
            text = text.replace(f'"{out["name"]}"', f'"{out["name"]}_k"')
    return json.loads(text)


V = np.linspace(0.5, 1.5, 16, dtype=np.float32)


def _scaled_columns(rewritten: bool):
    return capture((lambda x, w, v: x @ (w * v)) if rewritten else (lambda x, w, v: (x @ w) * v), X, W, V)


def test_a_candidate_computing_the_same_gets_the_background_verdict():
    program, timings = _scaled_columns(False), {}
    with BackgroundValidation(program, "real", timings) as early:
        early.start(_scaled_columns(True))
        verdict = early.result_for(_renamed(_scaled_columns(True)))
    assert verdict is early.jobs[-1].value  # the background job's verdict, not a new check
    assert verdict["status"] == "passed" and "validate" in timings
    assert not any(job.paused for job in early.jobs)  # every job's thread is gone and its pause handed back


def test_no_cycle_collection_while_a_job_thread_runs():
    gate = threading.Event()
    job = Job(lambda: (gate.wait(10), gc.isenabled())[1])
    job.settle()  # still running: the pause stays
    assert job.paused
    gate.set()
    assert job.result() is False and not job.paused


def test_the_inputs_are_drawn_ahead_and_shared_by_the_validation():
    program = _program()
    with BackgroundValidation(program, "real", {}) as early:
        early.settle(wait=True)
        drawn = dict(early.draws.arrays)
        assert {(seed, name) for seed, name, *_ in drawn} == {
            (s, i["name"]) for s in range(TRIALS) for i in program["inputs"]
        }
        assert not early.checking.is_set()
        early.start(program)
        assert early.checking.is_set()  # what the check reads and was not drawn yet, it draws itself
        early.result_for(program)
    assert all(early.draws.arrays[key] is array for key, array in drawn.items())  # used, not drawn again


def test_collection_comes_back_only_when_the_last_holder_releases():
    pause, was_enabled = CollectionPause(), gc.isenabled()
    try:
        gc.enable()
        pause.hold(), pause.hold()
        pause.release()
        assert not gc.isenabled()
        pause.release()
        assert gc.isenabled()
    finally:
        (gc.enable if was_enabled else gc.disable)()


def _wrong(program):
    return json.loads(json.dumps(program).replace('"tanh"', '"logistic"'))


def test_a_different_candidate_is_validated_on_its_own_and_the_speculative_check_stops():
    program = _program()
    with BackgroundValidation(program, "real", {}) as early:
        early.start(program)
        assert early.result_for(_wrong(program))["status"] == "failed"
        assert early.speculative.stopped.is_set() and not early.draws.stopped.is_set()


def test_a_candidate_sharing_a_region_with_the_algebraic_optimum_reuses_its_check():
    program = two_regions(False, False)
    with BackgroundValidation(program, "real", {}) as early:
        early.start(two_regions(True, True))
        verdict = early.result_for(two_regions(True, False))  # fusion kept one of the two rewrites
        assert not early.speculative.stopped.is_set()
    assert verdict["status"] == "passed" and verdict["reused_values"] == 1 and verdict["draws"] == []
    assert early.jobs[-1].value["status"] == "passed" and early.jobs[-1].value["distinct_regions"] == 2


def test_a_candidate_regrouping_around_values_the_algebraic_optimum_checks_waits_for_that_check():
    # fusion kept the merged projections and regrouped what follows them: the speculative check
    # shows the merged matmul's slices, and the candidate's own check starts from them
    program = projections(False, lambda q, k, v: q * k + v)
    with BackgroundValidation(program, "real", {}) as early:
        early.start(projections(True, lambda q, k, v: q * k + v))
        verdict = early.result_for(projections(True, lambda q, k, v: q * k - (-v)))
        assert not early.speculative.stopped.is_set()
    assert verdict["status"] == "passed" and verdict["reused_values"] == 3


def test_a_wrong_region_beside_a_reused_one_still_fails():
    program = two_regions(False, False)
    with BackgroundValidation(program, "real", {}) as early:
        early.start(two_regions(True, False))
        assert early.result_for(_wrong(two_regions(True, False)))["status"] == "failed"


def test_a_stopped_check_raises_at_its_next_draw_and_leaves_the_shared_draws_usable():
    program, draws = _program(), InputDraws()
    speculative = draws.stoppable()
    speculative.stop()
    with pytest.raises(Stopped):
        validate(program, _wrong(program), draws=speculative)
    assert validate(program, _wrong(program), draws=draws)["status"] == "failed"


def test_the_pipeline_validates_beside_fusion_and_under_the_callers_x64_mode():
    rng = np.random.default_rng(0)
    x, w, v = (rng.normal(size=s).astype(np.float32) for s in [(64, 128), (128, 256), (256,)])
    scaled = capture(lambda x, w, v: (x @ w) * v, x, w, v, weight_argnums=(1, 2))
    response = optimize(scaled)  # the scale folded into the weight (x @ (w * v)): a different computation
    assert response["program"] != scaled and response["validation"]["status"] == "passed"
    assert "validate" in response["report"]["background_s"]  # beside fusion, apart from the stages' sum
    with jax.enable_x64(True):  # the thread runs under the caller's JAX config, not its own default
        x, w, v = (np.full(s, 0.5) for s in [(1, 1), (1, 1), (1,)])
        wide = capture(lambda x, w, v: (x @ w) * v, x, w, v)  # rewritten: x @ (w * v)
        response = optimize(wide)
        assert response["program"] != wide and response["validation"]["status"] == "passed"
