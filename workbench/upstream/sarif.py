"""SARIF 2.1.0 output of the lint, for code review: one result per finding.

Each result sits at the read's file and line; the install (and the class definition) are related
locations; `partialFingerprints` carries the finding's key, so a review tool matches a finding
across commits although its line moves. One run per linted source; paths are relative to what
was linted (a release's unpacked wheel, or the checkout named by `--sglang-src`, whose root is
`SRCROOT`).
"""

from __future__ import annotations

from pathlib import Path

from .gate import Failing
from .static.finding import AnyFinding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
RULE_ID = "WB-SPECINFO-ATTR"
RULE = {
    "id": RULE_ID,
    "name": "SpecInputMissingAttribute",
    "shortDescription": {"text": "An attention backend reads a spec_info attribute the installed spec input lacks"},
    "fullDescription": {
        "text": "A read of spec_info.<attr> reachable from an attention backend's init_forward_metadata in "
        "forward mode M, not guarded (getattr default, hasattr, isinstance), where a worker installs a "
        "spec-input class without <attr> as spec_info in mode M: an AttributeError when that pass runs."
    },
    "help": {
        "text": "Declare the attribute on the spec-input class (a field with a None default, as PR #28221 did "
        "for EagleDraftExtendInput.kv_indptr), or read it with getattr(spec_info, '<attr>', None)."
    },
    "defaultConfiguration": {"level": "warning"},
}
_LEVEL = {
    "confirmed": "error",
    "confirmed end to end": "error",
    "traced: raised": "error",
    "unverified": "warning",
    None: "warning",
    "refuted": "note",
    "unreachable": "note",
    "traced: not read": "note",
}


def _location(prefix: str, file: str, line: int, message: str | None = None, loc_id: int | None = None) -> dict:
    loc: dict = {
        "physicalLocation": {
            "artifactLocation": {"uri": prefix + file, "uriBaseId": "SRCROOT"},
            "region": {"startLine": int(line)},
        }
    }
    if message is not None:
        loc["message"] = {"text": message}
    if loc_id is not None:
        loc["id"] = loc_id
    return loc


def sarif_result(f: AnyFinding, prefix: str, gate: str | None) -> dict:
    """The SARIF result of one finding (`gate`: why it fails the gate, if it does)."""
    verdict = f.verdict
    text = (
        f"{f.backend_class} reads spec_info.{f.attr} in {f.mode} ({f.read_function}), and "
        f"{f.spec_class}, installed as spec_info in {f.mode} at "
        f"{f.install_file.rsplit('/', 1)[-1]}:{f.install_line}, has no attribute {f.attr!r}."
    )
    if verdict:
        text += f" Verdict: {verdict}: {f.verdict_reason}"
    if gate:
        text += f" Gate: {gate}."
    related = [_location(prefix, f.install_file, f.install_line, f"{f.spec_class} installed here", 1)]
    if f.spec_class_file:
        related.append(_location(prefix, f.spec_class_file, f.spec_class_line, f"class {f.spec_class} defined here", 2))
    return {
        "ruleId": RULE_ID,
        "ruleIndex": 0,
        "level": "error" if gate else _LEVEL.get(verdict, "warning"),
        "message": {"text": text},
        "locations": [_location(prefix, f.read_file, f.read_line)],
        "relatedLocations": related,
        "partialFingerprints": {"findingKey/v1": f.key},
        "properties": {
            "backend": f.backend,
            "mode": f.mode,
            "spec_class": f.spec_class,
            "attr": f.attr,
            "verdict": verdict,
            "verdict_reason": f.verdict_reason,
            "release": f.release,
            "gate": gate,
        },
    }


def to_sarif(result: dict, roots: dict[str, tuple[Path | None, str]], failing: list[Failing], version: str) -> dict:
    """A SARIF 2.1.0 log of a `guard.check` result.

    roots: {source label: (the folder paths are relative to, prefix of `sglang/` below it)}.
    failing: the gate's failing findings (their results are errors and say why).
    """
    why = {(x.finding.source, x.finding.key, x.finding.read_line): x.gate for x in failing}
    runs = []
    for r in result["results"]:
        base, prefix = roots.get(r["source"], (None, ""))
        run: dict = {
            "tool": {
                "driver": {
                    "name": "eagle-workbench upstream lint",
                    "semanticVersion": "2.0.0",
                    "version": version,
                    "rules": [RULE],
                }
            },
            "automationDetails": {"id": f"upstream-lint/{r['source']}"},
            "results": [sarif_result(f, prefix, why.get((f.source, f.key, f.read_line))) for f in r["findings"]],
        }
        if base is not None:
            run["originalUriBaseIds"] = {"SRCROOT": {"uri": Path(base).resolve().as_uri() + "/"}}
        runs.append(run)
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": runs}
