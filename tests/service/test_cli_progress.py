"""The CLI's live progress line: a job's status and the optimizer's own reports both show the stage,
the e-graph's size, the best estimate and the elapsed time; the line is cleared at the end."""
from __future__ import annotations

import io

from rich.console import Console

from service.cli_progress import live_progress


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=160), out


def test_the_optimizers_reports_accumulate_into_one_line():
    console, out = _console()
    with live_progress("optimize model.json", console) as listen:
        listen({"stage": "saturate"})
        listen({"egraph_nodes": 12345})
        listen({"stage": "extract_kernels", "best_estimate_s": 1.5e-6})
    text = out.getvalue()
    assert "optimize model.json" in text and "extract_kernels" in text
    assert "12,345 e-nodes" in text and "best 1.500 us" in text and " s" in text


def test_a_job_status_shows_its_state_and_progress():
    console, out = _console()
    with live_progress("optimize", console) as listen:
        listen({"id": "abc", "state": "running", "progress": {"stage": "fuse", "egraph_nodes": 7,
                                                              "best_estimate_s": None, "elapsed_s": 0.4}})
    text = out.getvalue()
    assert "running" in text and "fuse" in text and "7 e-nodes" in text and "best" not in text
