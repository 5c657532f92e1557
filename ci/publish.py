"""What the nightly writes beside ``report.html`` for people and CI systems: each executed notebook
as an HTML page (nbconvert), ``junit.xml`` (one test case per cell) and ``summary.md`` (Markdown
for a CI job summary, e.g. ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

from workbench_ci.expect import describe, describe_expect
from workbench_ci.upstream_lane import lane_line

if TYPE_CHECKING:
    from workbench_ci.results import CellResult


def export_html(out: Path, cells: list[CellResult]) -> None:
    """Write ``notebooks/<slug>.html`` beside every executed ``.ipynb`` and add it to the cell's paths.

    A notebook that cannot be converted gets a page saying why (the ``.ipynb`` stays linked)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    for c in cells:
        nb_rel = c.paths.get("notebook")
        if not nb_rel or not (out / nb_rel).is_file():
            continue
        page_rel = str(Path(nb_rel).with_suffix(".html"))
        try:
            body, _ = exporter.from_notebook_node(
                nbformat.read(out / nb_rel, as_version=4), resources={"metadata": {"name": c.name}}
            )
        except Exception as e:  # a truncated notebook from a killed kernel: say so, keep the .ipynb
            body = (
                f"<!doctype html><meta charset='utf-8'><p>{html.escape(nb_rel)} could not be converted: "
                f"{html.escape(type(e).__name__)}: {html.escape(str(e))}</p>"
            )
        (out / page_rel).write_text(body, encoding="utf-8")
        c.paths = {**c.paths, "html": page_rel}


def shipped_note(nb_record: dict | None) -> str | None:
    """For a notebook that showed shipped measurements instead of measuring now: when and with what."""
    runs = (nb_record or {}).get("runs") or {}
    source = next(
        (
            str(r["config"]["source"])
            for r in runs.values()
            if str((r.get("config") or {}).get("source", "")).startswith("shipped")
        ),
        None,
    )
    if source is None:
        return None
    versions = sorted(
        {
            ", ".join(
                f"{k} {v}"
                for k, v in sorted(((r.get("env") or {}).get("packages") or {}).items())
                if k in ("sglang", "torch", "triton")
            )
            for r in runs.values()
            if (r.get("env") or {}).get("packages")
        }
    )
    return f"{source}, not measured tonight" + (": " + "; ".join(versions) if versions else "")


def _got(c: CellResult) -> str:
    got = "; ".join(f"{role}: {describe(rec)}" for role, rec in c.runs().items()) or c.execution.status
    note = shipped_note(c.notebook_record)
    return f"{got} [{note}]" if note else got


def write_junit(out: Path, summary: dict, cells: list[CellResult]) -> Path:
    """``junit.xml``: a test case per cell (an unexpected cell is a failure with its reasons), and one
    failing ``(merge)`` case per merge problem (a shard without results)."""
    problems = summary.get("problems") or []
    bad = sum(1 for c in cells if c.verdict != "expected") + len(problems)
    suite = ET.Element(
        "testsuite",
        name=f"nightly {summary['matrix']}",
        tests=str(len(cells) + len(problems)),
        failures=str(bad),
        errors="0",
        time=f"{summary['wall_s']:.1f}",
        timestamp=str(summary["night"]),
    )
    for c in cells:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=str(c.notebook).replace("/", ".").removesuffix(".ipynb"),
            name=c.name,
            time=f"{c.execution.wall_s:.1f}",
        )
        if c.verdict != "expected":
            ET.SubElement(case, "failure", message="; ".join(c.reasons)[:1000]).text = "\n".join(c.reasons)
        ET.SubElement(case, "system-out").text = (
            "expected: " + "; ".join(f"{r}: {describe_expect(w)}" for r, w in c.expect.items()) + "\ngot: " + _got(c)
        )
    for p in problems:
        case = ET.SubElement(suite, "testcase", classname="workbench_ci.nightly", name="(merge)")
        ET.SubElement(case, "failure", message=p).text = p
    path = out / "junit.xml"
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_markdown(out: Path, summary: dict, cells: list[CellResult]) -> Path:
    """``summary.md``: the verdict, the unexpected cells with their reasons, then every cell in a table."""
    bad = summary["unexpected"]
    head = (
        f"## Nightly {'passed' if summary['verdict'] == 'pass' else 'FAILED'}: "
        f"{summary['cells_total'] - len([b for b in bad if b['cell'] != '(merge)'])}/{summary['cells_total']} "
        "cells as expected\n\n"
        f"Night `{summary['night']}` · matrix `{summary['matrix']}` · {summary['wall_s']:.0f} s · "
        f"{summary.get('history_note', '')}\n\n"
        "Expected crashes count as a pass: a cell passes when its runs end as the matrix predicts.\n"
    )
    lines = [head, _md(lane_line(summary["lane"])) + "\n"]
    if bad:
        lines.append("### Unexpected\n")
        lines += [f"- **{_md(b['cell'])}**: {_md('; '.join(b['reasons']))}" for b in bad]
        lines.append("")
    lines += ["### Cells\n", "| cell | verdict | expected | got | wall s |", "|---|---|---|---|---|"]
    for c in cells:
        expect = "; ".join(f"{r}: {describe_expect(w)}" for r, w in c.expect.items())
        mark = "ok" if c.verdict == "expected" else "**UNEXPECTED**"
        lines.append(f"| {_md(c.name)} | {mark} | {_md(expect)} | {_md(_got(c)[:300])} | {c.execution.wall_s:.1f} |")
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path
