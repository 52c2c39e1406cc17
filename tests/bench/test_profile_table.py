"""The hardware-profiles page states the profiles' figures as the shipped TOML files hold them."""
from __future__ import annotations

from bench import profile_table
from costmodel.profile import load_profile, with_overrides
from costmodel.provenance import Basis, numbers


def test_the_profiles_page_shows_the_shipped_profiles_figures():
    page = profile_table.PAGE.read_text()
    block = page.split("<!-- profiles:begin -->\n", 1)[1].split("\n<!-- profiles:end -->", 1)[0]
    assert block == profile_table.tables(), (
        "docs/hardware-profiles.md is out of date with costmodel/profiles/: run `python -m bench.profile_table`")


def test_a_source_is_measured_published_or_a_definition_by_how_it_reads():
    kind = lambda **basis: profile_table.basis_kind(Basis(**basis))  # noqa: E731
    assert kind(source="measured by optu calibrate on 2026-12-07: slope of ...") == "measured"
    assert kind(source="measured on an NVIDIA H200 (h200.json)") == "measured"
    assert kind(source="measured thermo-optic phase-shifter rise time 1.15 us, Photonics 2022") == "published"
    assert kind(source="by definition: the L2 plays the SRAM") == "by definition"
    assert kind(assumed=True, reason="judgement") == "assumed"


def test_an_overridden_figure_shows_its_new_value_labelled_assumed():
    shipped = load_profile("gpu-roofline")
    changed = with_overrides(shipped, {"memory.hbm_bw_bytes_per_s": 1.0e12})
    before = profile_table.figures_table({"gpu-roofline": shipped})
    after = profile_table.figures_table({"gpu-roofline": changed})
    assert "| 3.69 TB/s (measured) |" in before
    assert "| 1 TB/s (assumed) |" in after and "3.69 TB/s" not in after


def test_counts_cover_every_number_of_each_profile_once():
    profile = load_profile("optu-v1")
    row = profile_table.counts_table({"optu-v1": profile}).splitlines()[-1]
    total, *by_kind = (int(cell) for cell in row.strip("|").split("|")[1:])
    assert total == sum(by_kind) == len(numbers(profile))
