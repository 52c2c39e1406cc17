"""The worker warm-up program exercises the stages a request does, and optimizes cleanly; a worker
runs it before it says it is ready, unless told not to."""
import pytest

from rewrites.chain_order import find_chains
from service.jobqueue.pool import WorkerProcess
from service.optimizer import pipeline
from service.optimizer.warm_up import warm_up, warm_up_program


def test_the_warm_up_program_holds_attention_a_matmul_chain_and_weights():
    program = warm_up_program()
    ops = [e["op"] for e in program["eqns"]]
    assert ops.count("dot_general") >= 8 and {"exp", "tanh", "rsqrt"} <= set(ops)
    assert find_chains(program)  # the chain's dynamic program runs too
    assert sum(s.get("role") == "weight" for s in program["inputs"]) == 7


def test_warm_up_runs_the_whole_pipeline_twice_alike_with_a_passed_validation():
    seen = []
    warm_up(lambda program, hardware, options: seen.append(pipeline.optimize(program, hardware, options)))
    first, second = seen
    assert first["validation"]["status"] == second["validation"]["status"] == "passed"
    assert first["report"]["rewrites"]  # rules fired: the rulesets were built and run
    # the second run loads into the e-graphs the first one's loads left kept, and finds the same
    assert (second["program"], second["report"]["rewrites"]) == (first["program"], first["report"]["rewrites"])


@pytest.mark.integration
@pytest.mark.parametrize("warm", [True, False])
def test_a_worker_runs_the_warm_up_before_it_is_ready_only_when_asked(warm):
    worker = WorkerProcess(warm_up=warm)
    try:
        assert worker.wait_ready(timeout_s=600)  # a hang guard: a loaded machine takes its time
        assert worker.warmed is warm
    finally:
        worker.stop()
