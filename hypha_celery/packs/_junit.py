"""A pack test run as JUnit XML (what CI systems read): one ``<testsuite>`` for the pack,
one ``<testcase>`` per case (``classname`` ``<pack ref>.<kind>``), a ``<failure>`` for a
failed check, an ``<error>`` for a run that did not complete. Built with
:mod:`xml.etree.ElementTree` (escaped), written whole or not at all."""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from hypha_celery.packs._cases import CaseResult, CaseStatus, PackTestReport

__all__ = ["junit_xml", "write_junit"]


def junit_xml(report: PackTestReport) -> str:
    """The report as a JUnit XML document (UTF-8 text with its declaration)."""
    s = report.summary
    counts = {"tests": str(s["total"]), "failures": str(s["failed"]),
              "errors": str(s["errors"]), "skipped": "0", "time": f"{report.duration:.3f}"}
    root = ET.Element("testsuites", {"name": "hypha pack test", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": report.pack, **counts})
    for case in report.cases:
        _testcase(suite, report.pack, case)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def _testcase(suite: ET.Element, pack: str, case: CaseResult) -> None:
    element = ET.SubElement(suite, "testcase", {
        "classname": f"{pack}.{case.kind.value}", "name": case.id,
        "time": f"{case.duration:.3f}"})
    if case.status is CaseStatus.FAILED:
        failed = [c for c in case.checks if not c.passed]
        verdict = ET.SubElement(element, "failure", {
            "message": case.message, "type": failed[0].id if failed else "check"})
        verdict.text = "\n".join(f"{c.id}: {c.message}" for c in failed)
    elif case.status is CaseStatus.ERROR:
        verdict = ET.SubElement(element, "error", {"message": case.message,
                                                   "type": "run_not_completed"})
        verdict.text = case.message
    out = ET.SubElement(element, "system-out")
    out.text = "\n".join([f"workflow: {case.workflow}",
                          *(f"run: {run_id}" for run_id in case.run_ids),
                          *(f"{'pass' if c.passed else 'FAIL'} {c.id}" for c in case.checks)])


def write_junit(report: PackTestReport, path: str | os.PathLike[str]) -> Path:
    """Write :func:`junit_xml` to ``path`` atomically (a temporary file in the same
    directory, then a rename): a reader sees the old file or the whole new one."""
    target = Path(path)
    text = junit_xml(report)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
