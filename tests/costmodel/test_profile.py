"""Tests for costmodel.profile: shipped profiles load; every user error names its file and field."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pydantic
import pytest

from costmodel.profile import (
    PROFILES_DIR,
    HardwareProfile,
    ProfileError,
    list_profiles,
    load_profile,
    profile_from_dict,
    with_overrides,
)
from costmodel.provenance import OVERRIDDEN, numbers, unlabelled


def _shipped_dict(name: str = "optu-v1") -> dict:
    return tomllib.loads((PROFILES_DIR / f"{name}.toml").read_text())


def _write(tmp_path: Path, data_text: str) -> str:
    path = tmp_path / "custom.toml"
    path.write_text(data_text)
    return str(path)


def _toml_without(line_start: str) -> str:
    text = (PROFILES_DIR / "optu-v1.toml").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith(line_start))


def test_list_profiles_names_the_three_shipped_profiles():
    assert {"optu-v1", "gpu-roofline", "cpu-host"} <= set(list_profiles())


@pytest.mark.parametrize("name", list_profiles())
def test_every_shipped_profile_loads_and_is_named_after_its_file(name):
    profile = load_profile(name)
    assert isinstance(profile, HardwareProfile)
    assert profile.name == name
    assert profile.vector.weight("default") > 0


@pytest.mark.parametrize("name", list_profiles())
def test_every_number_in_a_shipped_profile_has_a_source_or_an_assumption(name):
    profile = load_profile(name)
    assert numbers(profile) and unlabelled(profile) == []  # defaults count: a number left unset is still used


def test_a_number_without_provenance_is_found():
    data = _shipped_dict()
    del data["provenance"]["gemm.clock_hz"]
    assert unlabelled(profile_from_dict(data)) == ["gemm.clock_hz"]


@pytest.mark.parametrize("basis, problem", [
    ({}, "give a 'source'"),
    ({"assumed": True}, "'reason'"),
    ({"source": "a paper", "assumed": True, "reason": "a guess"}, "no 'source'"),
    ({"source": "a paper", "reason": "a guess"}, "give a 'source'"),
])
def test_a_label_must_be_a_source_or_an_assumption_with_its_reason(basis, problem):
    data = _shipped_dict()
    data["provenance"]["gemm.rows"] = basis
    with pytest.raises(ProfileError, match=re.escape(problem)) as err:
        profile_from_dict(data)
    assert "provenance.gemm.rows" in str(err.value)


def test_a_label_for_no_number_is_rejected():
    data = _shipped_dict()
    data["provenance"]["gemm.colour"] = {"source": "a paper"}
    with pytest.raises(ProfileError, match="gemm.colour"):
        profile_from_dict(data)


def test_provenance_is_not_part_of_the_cost_or_the_hash():
    data = _shipped_dict()
    data["provenance"]["gemm.rows"] = {"assumed": True, "reason": "another story"}
    relabelled = profile_from_dict(data)
    assert relabelled.costs() == load_profile("optu-v1").costs() and hash(relabelled) == hash(load_profile("optu-v1"))


def test_named_profiles_are_cached():
    assert load_profile("optu-v1") is load_profile("optu-v1")


def test_profile_is_frozen_and_hashable():
    profile = load_profile("optu-v1")
    with pytest.raises(pydantic.ValidationError):
        profile.gemm.rows = 1
    assert hash(profile) == hash(profile_from_dict(_shipped_dict()))


def test_load_profile_by_path(tmp_path):
    path = _write(tmp_path, (PROFILES_DIR / "gpu-roofline.toml").read_text())
    assert load_profile(path).name == "gpu-roofline"


def test_unknown_name_raises_profile_error_listing_known_profiles():
    with pytest.raises(ProfileError, match=r"nope.*optu-v1"):
        load_profile("nope")


def test_missing_file_path_names_the_file(tmp_path):
    with pytest.raises(ProfileError, match="missing.toml"):
        load_profile(str(tmp_path / "missing.toml"))


def test_toml_syntax_error_names_the_file(tmp_path):
    path = _write(tmp_path, "name = 'x'\n[gemm\nrows = 1\n")
    with pytest.raises(ProfileError, match=r"custom\.toml.*TOML syntax error"):
        load_profile(path)


def test_negative_number_names_the_field(tmp_path):
    text = (PROFILES_DIR / "optu-v1.toml").read_text().replace("rows = 128", "rows = -128", 1)
    with pytest.raises(ProfileError, match=r"custom\.toml.*'gemm\.rows'.*greater than 0") as info:
        load_profile(_write(tmp_path, text))
    assert info.value.field == "gemm.rows"


def test_negative_energy_names_the_field():
    data = _shipped_dict()
    data["memory"]["hbm_energy_per_byte_j"] = -1.0
    with pytest.raises(ProfileError, match=r"'memory\.hbm_energy_per_byte_j'"):
        profile_from_dict(data)


def test_overlap_above_one_is_rejected():
    data = _shipped_dict()
    data["gemm"]["weight_load_overlap"] = 1.5
    with pytest.raises(ProfileError, match=r"'gemm\.weight_load_overlap'.*less than or equal to 1"):
        profile_from_dict(data)


def test_unknown_field_names_the_field(tmp_path):
    text = (PROFILES_DIR / "optu-v1.toml").read_text().replace("[gemm]\n", "[gemm]\nbogus = 3\n", 1)
    with pytest.raises(ProfileError, match=r"custom\.toml.*'gemm\.bogus': unknown field"):
        load_profile(_write(tmp_path, text))


def test_missing_field_names_the_field(tmp_path):
    path = _write(tmp_path, _toml_without("hbm_bw_bytes_per_s"))
    with pytest.raises(ProfileError, match=r"'memory\.hbm_bw_bytes_per_s': missing required field"):
        load_profile(path)


def test_op_weights_without_default_is_rejected():
    data = _shipped_dict()
    del data["vector"]["op_weights"]["default"]
    with pytest.raises(ProfileError, match=r"'vector\.op_weights'.*default"):
        profile_from_dict(data)


def test_non_table_input_is_rejected():
    with pytest.raises(ProfileError, match="expected a table"):
        profile_from_dict([1, 2])  # type: ignore[arg-type]


def test_op_weight_lookup_uses_kind_then_default():
    vector = load_profile("optu-v1").vector
    assert vector.weight("exp") == 8
    assert vector.weight("erf") == 10
    assert vector.weight("lt") == vector.weight("compare") == 1
    assert vector.weight("select_n") == 1
    assert vector.weight("log1p") == vector.weight("log")
    assert vector.weight("reduce_max") == vector.weight("reduce")
    assert vector.weight("cumsum") == vector.weight("default")


def test_overrides_replace_nested_values_and_keep_the_rest():
    base = load_profile("optu-v1")
    changed = with_overrides(base, {"gemm.rows": 64, "memory.hbm_bw_bytes_per_s": 1e12})
    assert changed.gemm.rows == 64
    assert changed.memory.hbm_bw_bytes_per_s == 1e12
    assert changed.gemm.cols == base.gemm.cols
    assert base.gemm.rows == 128  # the original is untouched


def test_an_overridden_number_is_labelled_as_the_requests_not_the_profiles():
    profile = with_overrides(load_profile("optu-v1"), {"gemm.rows": 64})
    assert profile.provenance["gemm.rows"].reason == OVERRIDDEN and unlabelled(profile) == []
    assert profile.provenance["gemm.cols"] == load_profile("optu-v1").provenance["gemm.cols"]


def test_overrides_may_add_an_op_weight():
    changed = with_overrides(load_profile("optu-v1"), {"vector.op_weights.cumsum": 3})
    assert changed.vector.weight("cumsum") == 3


@pytest.mark.parametrize("name", ["gemm.bogus", "bogus.rows", "gemm.rows.deeper", "nothing"])
def test_overrides_reject_unknown_names(name):
    with pytest.raises(ProfileError, match=re.escape(name.split(".")[0])) as info:
        with_overrides(load_profile("optu-v1"), {name: 1})
    assert info.value.field == name


def test_overrides_reject_replacing_a_whole_section():
    with pytest.raises(ProfileError, match="section"):
        with_overrides(load_profile("optu-v1"), {"gemm": 1})


def test_overrides_are_validated():
    with pytest.raises(ProfileError, match=r"'gemm\.cores'"):
        with_overrides(load_profile("optu-v1"), {"gemm.cores": 0})


def test_optional_terms_default_to_off_so_older_profiles_load_unchanged():
    p = profile_from_dict(_shipped_dict("optu-v1"))
    assert p.memory.cache_bytes == 0 and p.memory.cache_bw_bytes_per_s is None
    assert p.gemm.call_overhead_s == p.gemm.conv_overhead_s == 0 and p.gemm.conv_positions_per_s is None
    k = p.kernel
    assert k.loop_iteration_s == k.input_overhead_s == k.output_overhead_s == 0


def test_the_calibrated_cpu_profile_sets_every_optional_term():
    p = load_profile("cpu-host")
    assert p.memory.cache_bytes > 0 and p.memory.cache_bw_bytes_per_s > p.memory.hbm_bw_bytes_per_s
    assert p.gemm.conv_positions_per_s > 0 and p.kernel.output_overhead_s > 0


def test_a_cache_without_its_bandwidth_names_the_missing_field():
    with pytest.raises(ProfileError) as info:
        with_overrides(load_profile("optu-v1"), {"memory.cache_bytes": 1e6})
    assert info.value.field == "memory.cache_bw_bytes_per_s"
    cached = with_overrides(load_profile("optu-v1"),
                            {"memory.cache_bytes": 1e6, "memory.cache_bw_bytes_per_s": 2e12})
    assert cached.memory.cache_bw_bytes_per_s == 2e12


def test_a_zero_gather_rate_is_rejected_rather_than_divided_by():
    with pytest.raises(ProfileError, match=r"'gemm\.conv_positions_per_s'"):
        with_overrides(load_profile("optu-v1"), {"gemm.conv_positions_per_s": 0})
