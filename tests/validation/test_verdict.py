"""The typed verdict names the keys the response's `Validation` model documents, required where it
requires them, so the stages' verdicts and the schema cannot drift apart."""
from __future__ import annotations

import pytest

from service.optimizer.response import Draw, Validation
from tests.typed_json import model_keys
from validation import verdict
from validation.validate import identical


@pytest.mark.parametrize("typed, model", [(verdict.Verdict, Validation), (verdict.DrawFinding, Draw)])
def test_each_typed_verdict_has_the_models_keys_required_alike(typed, model):
    assert (set(typed.__annotations__), set(typed.__required_keys__)) == model_keys(model)


def test_a_verdict_the_stages_build_validates_as_the_response_documents_it():
    built = identical()
    assert set(built) <= set(verdict.Verdict.__annotations__)
    assert Validation.model_validate(built).status == built["status"] == "identical"
