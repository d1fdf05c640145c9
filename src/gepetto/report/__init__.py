"""Self-contained HTML report of an optimisation run: lineage, scores, front, diffs, costs and sample outputs."""

from gepetto.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]
