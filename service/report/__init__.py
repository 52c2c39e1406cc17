"""The HTML report of an optimize response: one self-contained page (summary, kernel timeline,
roofline, dataflow before and after, rewrites, e-graph statistics) shared by the HTTP API, the
client and the CLI."""
from service.report.page import render_report

__all__ = ["render_report"]
