"""The rendered report page (whole optimizations in-process, hence slow): one self-contained file
with every kernel in its graphs and the response's numbers in its summary, written by `optu
optimize --report` and shown by the client's result in Jupyter."""
from __future__ import annotations

import html
import json
import re

import pytest
from report_example import HARDWARE, WEIGHTS, example_arguments, network

from service.cli import main
from service.client import optimize
from service.optimizer import pipeline
from service.report import render_report

pytestmark = pytest.mark.slow


def section(page: str, element_id: str) -> str:
    """The markup from the element with `element_id` to the next figure or heading."""
    start = page.index(f'id="{element_id}"')
    return page[start:re.compile(r"<figure|<h2").search(page, start + 1).start()]


def kernel_titles(svg: str) -> list[str]:
    return re.findall(r'<g class="node"><title>([kp]\d+)</title>', svg)


def test_report_is_one_self_contained_page_with_every_kernel_and_the_responses_numbers(response):
    page = render_report(response)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    markup = re.sub(r"<script>.*?</script>", "", page, flags=re.S)  # the inline scripts' own strings aside
    assert not re.search(r"<(script|img|iframe)[^>]+\bsrc=|<link\b", markup), "the page loads a resource"
    assert page.count("<script>") == 2 and "window.vegaEmbed=" in page  # Vega inlined
    assert response["id"] in page
    est = response["estimate"]
    assert f'id="speedup-baseline">{est["speedup_vs_baseline"]:.3f}x<' in page
    assert f'id="speedup-naive">{est["speedup_vs_naive"]:.3f}x<' in page
    assert f'id="verdict">{response["validation"]["status"]}<' in page
    after = section(page, "dataflow-after")
    assert sorted(kernel_titles(after)) == sorted([f"k{k['id']}" for k in response["kernels"]]
                                                  + [f"p{k['id']}" for k in response["precompute_kernels"]])
    assert kernel_titles(section(page, "dataflow-before")) == [f"k{k['id']}" for k in response["baseline_kernels"]]
    specs = json.loads(re.search(r"const specs = (.*);\n", page).group(1))
    timeline = specs["timeline"]["data"]["values"]
    dispatch = ["dispatch"] if est["dispatch_s"] else []  # the call's own bar, first
    assert [row["kernel"] for row in timeline] == dispatch + [f"k{k['id']}" for k in response["kernels"]]
    rewrites = section(page, "rewrites")
    assert all(f"<code>{rule}</code>" in rewrites for rule, n in response["report"]["rewrites"].items() if n)


def test_a_result_stored_before_responses_carried_baseline_kernels_still_renders(response):
    older = {k: v for k, v in response.items() if k != "baseline_kernels"}
    before = section(render_report(older), "dataflow-before")
    assert "predates baseline kernels" in before and not kernel_titles(before)


def test_optu_optimize_writes_the_report_next_to_its_summary(program, tmp_path, capsys):
    source, out = tmp_path / "program.json", tmp_path / "out.html"
    source.write_text(json.dumps({"program": program, "hardware": HARDWARE}))
    assert main(["optimize", str(source), "--json", "--report", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    page = out.read_text(encoding="utf-8")
    assert printed["id"] in page and page.startswith("<!DOCTYPE html>")
    assert sorted(kernel_titles(section(page, "dataflow-after"))) == sorted(
        [f"k{k['id']}" for k in printed["kernels"]] + [f"p{k['id']}" for k in printed["precompute_kernels"]])


def test_the_clients_result_renders_its_report_and_shows_it_inline_in_jupyter():
    result = optimize(network, *example_arguments(), hardware=HARDWARE, weight_argnums=WEIGHTS)
    page = result.report_html()
    assert result.response["id"] in page
    frame = result._repr_html_()
    assert frame.startswith("<iframe srcdoc=\"") and 'sandbox="allow-scripts"' in frame
    assert html.unescape(re.search(r'srcdoc="([^"]*)"', frame).group(1)) == page


def test_a_program_that_computes_nothing_per_call_reports_so_instead_of_empty_charts():
    identity = {"format": "optu.jaxpr/v1", "inputs": [{"name": "a", "shape": [4], "dtype": "float32"}],
                "eqns": [], "outputs": ["a"]}
    page = render_report(json.loads(json.dumps(pipeline.optimize(identity))))
    assert "No kernel runs per call." in page
    assert json.loads(re.search(r"const specs = (.*);\n", page).group(1)) == {}
