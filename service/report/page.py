"""The report page: the response's tables, charts and graphs put into one self-contained HTML file,
with Vega, Vega-Lite and vega-embed inlined from the `vl-convert-python` package (no network at
view time; a Content-Security-Policy forbids any)."""
from __future__ import annotations

import functools

import altair as alt
import jinja2
import vl_convert

from costmodel.profile import HardwareProfile, list_profiles, load_profile
from service.report.dataflow import dataflow_graph, dataflow_svg
from service.report.figures import roofline_points, roofline_spec, timeline_spec
from service.report.style import BOUND_COLORS, BOUND_LABELS
from service.report.tables import estimate_rows, rewrite_rows, search_rows, validation_rows
from validation.response_json import ResponseJSON

_TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("service.report"), autoescape=True,
                                undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


@functools.cache
def vega_javascript() -> str:
    """Vega, Vega-Lite (the version altair writes) and vega-embed as one script defining
    `vegaEmbed`; bundled once per process (it takes a second or two)."""
    vega_lite = alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0]
    # Inside an inline <script>, "</script" would end the element; "<\/" is the same to JavaScript.
    return vl_convert.javascript_bundle(vl_version=vega_lite).replace("</script", "<\\/script")


def _profile(name: str) -> HardwareProfile | None:
    """The shipped profile the response was estimated on (for the roofline's ceilings); None for a
    request's own profile, which the response does not carry."""
    return load_profile(name) if name in list_profiles() else None


def render_report(response: ResponseJSON) -> str:
    """The HTML report of an optimize response (as the API answers it)."""
    kernels, report = response["kernels"], response["report"]
    baseline_kernels = response.get("baseline_kernels")
    before = None if baseline_kernels is None else dataflow_svg(dataflow_graph(baseline_kernels, name="before"))
    after = dataflow_svg(dataflow_graph(kernels, response.get("precompute_kernels"), name="after"))
    estimate, points = response["estimate"], roofline_points(kernels)
    specs = {}  # charts with something to draw (a program can be all weight-only work, or nothing)
    if kernels:
        specs["timeline"] = timeline_spec(kernels, estimate.get("dispatch_s", 0.0))
    if points:
        specs["roofline"] = roofline_spec(kernels, _profile(estimate["hardware"]))
    return _TEMPLATES.get_template("report.html.j2").render(
        response=response,
        estimate=estimate,
        estimates=estimate_rows(estimate),
        validation=validation_rows(response["validation"]),
        rewrites=rewrite_rows(report),
        search=search_rows(report),
        notes=report.get("notes", []),
        kernel_count=len(kernels),
        baseline_count=None if baseline_kernels is None else len(baseline_kernels),
        off_roofline=len(kernels) - len(points),
        specs=specs,
        before_svg=before,
        after_svg=after,
        bounds=[(BOUND_LABELS[b], c) for b, c in BOUND_COLORS.items()],
        vega_js=vega_javascript(),
    )
