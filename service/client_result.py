"""What the client gives back: `OptimizeResult`, one optimization (the response's fields, the
callable built from its program, its report and explanation), and `OptimizeError` when it fails."""
from __future__ import annotations

import html
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from lowering.kernel_json import EstimatesJSON, KernelJSON
from lowering.precompute import PrecomputedProgram
from validation.response_json import ReportJSON, ResponseJSON
from validation.verdict import Verdict
from wire.json_types import Program


class OptimizeError(RuntimeError):
    """Optimization failed: `status` is the HTTP status (the same codes in-process; None when no
    answer came back, e.g. the server is unreachable or validation failed) and `detail` the reason."""

    def __init__(self, message: str, *, status: int | None = None, detail: Any = None):
        super().__init__(message)
        self.status = status
        self.detail = detail


class ClientResponseJSON(ResponseJSON, total=False):
    torch_validation: Verdict  # a PyTorch model's: the optimized program checked against PyTorch itself


@dataclass
class OptimizeResult:
    """One optimization. The dict attributes are exactly the JSON response's fields; `precomputed`
    runs `fn`'s weight-only work (None when the program has none, or no weights)."""

    response: ClientResponseJSON
    fn: Callable[..., Any] = field(repr=False)
    precomputed: PrecomputedProgram | None = field(default=None, repr=False)
    original: Program | None = field(default=None, repr=False)  # the captured program that was optimized

    @property
    def program(self) -> Program:
        return self.response["program"]

    @property
    def kernels(self) -> list[KernelJSON]:
        return self.response["kernels"]

    @property
    def estimate(self) -> EstimatesJSON:
        return self.response["estimate"]

    @property
    def validation(self) -> Verdict:
        return self.response["validation"]

    @property
    def report(self) -> ReportJSON:
        return self.response["report"]

    def report_html(self) -> str:
        """The result's HTML report: one self-contained page (save it, or open it offline)."""
        from service.report import render_report  # the charting libraries load only when a report is asked for

        return render_report(self.response)

    def _repr_html_(self) -> str:
        # Jupyter shows this inline; a sandboxed frame keeps the report's styles and scripts its own.
        return (f'<iframe srcdoc="{html.escape(self.report_html(), quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 900px; border: 1px solid #ddd"></iframe>')

    def explain(self, file: TextIO | None = None) -> None:
        """Print the kernel listing with each kernel's estimate and the rewrites that shaped it (the
        fired rules whose patterns mention its ops or the original ops it replaces)."""
        from validation.listing import explained_listing  # imports the rule families: only when asked

        print(explained_listing(self.original, self.response), end="", file=file or sys.stdout)
