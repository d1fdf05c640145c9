"""The report's stylesheet and script, inlined into every report (no network: the page must work from a file,
offline). They are real files next to this module (report.css, report.js), shipped in the wheel."""

from importlib import resources


def _read(name: str) -> str:
    return resources.files("gepetto.report").joinpath(name).read_text(encoding="utf-8")


CSS = _read("report.css")
JS = _read("report.js")
