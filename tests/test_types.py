"""mypy finds nothing in the modules that state the typed JSON the stages pass (programs,
verdicts, kernels, responses, debug findings, job statuses, progress) and in those that build
them: a stage that writes a key its type does not declare, or a value of another type, fails here
before any request does."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKED = ["wire/json_types.py", "validation/verdict.py", "lowering/kernel_json.py", "validation/response_json.py",
           "validation/debug_json.py", "service/jobqueue/states.py", "service/optimizer/progress.py",
           "lowering/kernels.py", "validation/kernel_debug.py", "service/optimizer/pipeline.py",
           "service/jobqueue/local_store.py"]


@pytest.mark.integration  # a subprocess
def test_mypy_finds_nothing_in_the_typed_json_and_its_builders():
    # imports are read for their types, but only the modules listed are held to them
    run = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                          "--no-incremental", *CHECKED], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
