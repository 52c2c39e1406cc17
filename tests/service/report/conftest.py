"""The report tests' example program and its optimize response, computed in-process once per session."""
from __future__ import annotations

import json

import pytest
from report_example import HARDWARE, example_program

from service.optimizer.pipeline import optimize


@pytest.fixture(scope="session")
def program() -> dict:
    return example_program()


@pytest.fixture(scope="session")
def response(program) -> dict:
    # Through JSON, as the API answers it.
    return json.loads(json.dumps(optimize(program, HARDWARE, {"time_limit_s": 10})))
