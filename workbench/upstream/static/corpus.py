"""The lint measured on real upstream bugs: a corpus of crashes from SGLang's tracker, case by case.

Each case of `workbench/assets/upstream_bug_corpus.json` (schema in docs/upstream-guard.md) names its
threads, the releases it shipped in with the lines that show it (read from the wheels), and either
the finding the lint should report or why the crash is outside the lint's contract. For every case
`run_corpus` first checks each evidence line against the release's unpacked sources (a line that
does not match stops the run: the corpus's claim no longer holds), then lints every release the
case names and judges the case, its `verdict` (`CASE_VERDICTS`):

- `found`: the expected finding (backend, mode, class, attribute, reading function) is reported on
  every buggy release and not marked `unreachable`;
- `missed`: on some buggy release it is absent or marked `unreachable`;
- `found by the family`: outside the contract lint, but a family finding (`static/family.py`: a
  field None or empty on the IDLE batch dereferenced) is in the crashing function (file and
  function) on every buggy release;
- `not expressible`: the crash is outside the contract the lint models (the reason is the case's)
  and no family finding is in the crashing function on every buggy release; the lint still runs,
  and any finding it makes in the crashing function is listed;
- `not shipped`: no final release carries the crash (left out of every figure).

Recall is given apart for the held-out cases and the seen ones (the split is the corpus's, decided
before the lint ran on the held-out releases): `lint_recall` = found / cases the lint can express,
`family_recall` = (found + found by the family) / shipped cases (any other crash counts as missed).

A result written before `verdict` says `outcome` (the same words); `case_verdict` reads both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..context import UpstreamContext
from ..sources.releases import check_versions
from ..sources.trees import SourceTree, release_tree
from .family import analyse_family
from .lint import analyse

CORPUS_FILE = Path(__file__).resolve().parents[2] / "assets" / "upstream_bug_corpus.json"
SCHEMA = "upstream-bug-corpus/1"
SPLITS = ("held_out", "seen")
_EXPECTED_KEYS = ("backend", "mode", "spec_class", "attr", "read_function")
_CASE_KEYS = ("id", "title", "threads", "error", "kind", "crash_site", "releases", "evidence", "split")
_THREAD_PREFIX = "https://github.com/sgl-project/sglang/"
CASE_VERDICTS = ("found", "missed", "found by the family", "not expressible", "not shipped")


class CorpusError(ValueError):
    """A corpus file that is malformed, or whose evidence no longer matches a release's sources."""


def case_verdict(result: dict) -> str:
    """A judged case's verdict, written now (`verdict`) or before (`outcome`); CorpusError names a word
    that is not one of `CASE_VERDICTS`."""
    word = result["verdict"] if "verdict" in result else result.get("outcome")
    if word not in CASE_VERDICTS:
        raise CorpusError(f"case {result.get('id')!r}: verdict {word!r}; valid: {', '.join(CASE_VERDICTS)}")
    return word


def load_corpus(path: Path | None = None) -> dict:
    """The corpus at `path` (default: the shipped one), checked against the schema (CorpusError names
    the case and the field)."""
    path = Path(path) if path else CORPUS_FILE
    try:
        corpus = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CorpusError(f"cannot read the bug corpus {path}: {exc}") from None
    got = corpus.get("schema") if isinstance(corpus, dict) else corpus
    if got != SCHEMA:
        raise CorpusError(f"{path}: schema must be {SCHEMA!r}, got {got!r}")
    if not corpus.get("split_rule"):
        raise CorpusError(f"{path}: `split_rule` (how held-out cases were chosen) is missing")
    cases = corpus.get("cases")
    if not isinstance(cases, list) or not cases:
        raise CorpusError(f"{path}: `cases` must be a non-empty list")
    seen_ids: set[str] = set()
    for case in cases:
        _check_case(case, path)
        if case["id"] in seen_ids:
            raise CorpusError(f"{path}: case id {case['id']!r} appears twice")
        seen_ids.add(case["id"])
    return corpus


def _check_case(case: dict, path: Path) -> None:
    cid = case.get("id", "?") if isinstance(case, dict) else "?"
    where = f"{path}: case {cid!r}"
    if not isinstance(case, dict):
        raise CorpusError(f"{where}: a case must be an object")
    missing = [k for k in _CASE_KEYS if not case.get(k)]
    if missing:
        raise CorpusError(f"{where}: missing {', '.join(missing)}")
    if case["split"] not in SPLITS:
        raise CorpusError(f"{where}: split {case['split']!r} is not one of {', '.join(SPLITS)}")
    for t in case["threads"]:
        if not str(t.get("url", "")).startswith(_THREAD_PREFIX) or not t.get("role"):
            raise CorpusError(f"{where}: thread {t!r} needs a url under {_THREAD_PREFIX} and a role")
    rel = case["releases"]
    if not isinstance(rel.get("buggy"), list) or not isinstance(rel.get("fixed"), list):
        raise CorpusError(f"{where}: releases needs the lists `buggy` and `fixed`")
    expected, outside = case.get("expected"), case.get("outside_contract")
    if bool(expected) == bool(outside):
        raise CorpusError(f"{where}: give exactly one of `expected` (a finding) and `outside_contract` (why not)")
    if expected and any(not expected.get(k) for k in _EXPECTED_KEYS):
        raise CorpusError(f"{where}: expected needs {', '.join(_EXPECTED_KEYS)}")
    site = case["crash_site"]
    if not site.get("file") or not site.get("function"):
        raise CorpusError(f"{where}: crash_site needs file and function")
    for ev in case["evidence"]:
        if ev.get("role") not in ("bug", "fix") or not ev.get("release") or not ev.get("file") or not ev.get("code"):
            raise CorpusError(f"{where}: evidence {ev!r} needs role (bug or fix), release, file, line and code")
        if not isinstance(ev.get("line"), int) or ev["line"] < 1:
            raise CorpusError(f"{where}: evidence line {ev.get('line')!r} must be a positive integer")
    for v in rel["buggy"]:
        if not any(ev["role"] == "bug" and ev["release"] == v for ev in case["evidence"]):
            raise CorpusError(f"{where}: buggy release {v} has no `bug` evidence line")


def corpus_releases(cases: list[dict]) -> list[str]:
    """Every release the cases name (evidence, buggy and fixed), in first-named order."""
    out: list[str] = []
    for c in cases:
        for v in [*c["releases"]["buggy"], *c["releases"]["fixed"], *(e["release"] for e in c["evidence"])]:
            if v not in out:
                out.append(v)
    return out


def evidence_problems(case: dict, tree_for: Callable[[str], SourceTree]) -> list[str]:
    """Each evidence line of `case` that its release's sources do not carry (empty: all match)."""
    out = []
    for ev in case["evidence"]:
        text = tree_for(ev["release"]).get(ev["file"])
        lines = text.splitlines() if text is not None else []
        got = lines[ev["line"] - 1].strip() if 0 < ev["line"] <= len(lines) else None
        if got != ev["code"]:
            what = "no such file" if text is None else f"found {got!r}"
            out.append(f"{case['id']}: {ev['release']} {ev['file']}:{ev['line']} should be {ev['code']!r}, {what}")
    return out


def _matches(f: dict, expected: dict) -> bool:
    return all(f[k] == expected[k] for k in _EXPECTED_KEYS)


def judge_case(
    case: dict,
    findings_of: Callable[[str], list[dict]],
    family_of: Callable[[str], list[dict]] | None = None,
) -> dict:
    """The lint's result on one case; `findings_of(release)` is the lint's findings on a release,
    `family_of(release)` the family findings (`static/family.py`)."""
    rel, expected = case["releases"], case.get("expected")
    res = {
        "id": case["id"],
        "split": case["split"],
        "threads": [t["url"] for t in case["threads"]],
        "buggy": rel["buggy"],
        "fixed": rel["fixed"],
        "expected": expected,
        "outside_contract": case.get("outside_contract"),
        "per_release": {},
    }
    for v in [*rel["buggy"], *rel["fixed"]]:
        findings = findings_of(v)
        if expected:
            hits = [f for f in findings if _matches(f, expected)]
            res["per_release"][v] = {
                "buggy": v in rel["buggy"],
                "reported": [f"{f['read_file']}:{f['read_line']}" for f in hits],
                "verdicts": sorted({f.get("verdict") or "none" for f in hits}),
            }
        else:
            site = case["crash_site"]
            at_site = [f for f in findings if f["read_file"] == site["file"] and f["read_function"] == site["function"]]
            res["per_release"][v] = {"buggy": v in rel["buggy"], "at_crash_site": [f["key"] for f in at_site]}
            if family_of is not None:
                fam = [
                    f for f in family_of(v) if f["read_file"] == site["file"] and f["read_function"] == site["function"]
                ]
                res["per_release"][v]["family_at_crash_site"] = sorted({f"{f['key']}@{f['deref_line']}" for f in fam})
    if not rel["buggy"]:
        res["verdict"] = "not shipped"
    elif not expected:
        by_family = all(r.get("family_at_crash_site") for r in res["per_release"].values() if r["buggy"])
        res["verdict"] = "found by the family" if by_family else "not expressible"
    else:
        found = all(
            r["reported"] and "unreachable" not in r["verdicts"] for v, r in res["per_release"].items() if r["buggy"]
        )
        res["verdict"] = "found" if found else "missed"
        fixed = [v for v, r in res["per_release"].items() if not r["buggy"]]
        res["still_reported_when_fixed"] = [v for v in fixed if res["per_release"][v]["reported"]]
    return res


def figures(results: list[dict]) -> dict:
    """Per split: cases, shipped, expressible, found, lint_recall (found / expressible) and
    family_recall (found / shipped); None where the denominator is 0."""
    out = {}
    for split in SPLITS:
        rs = [r for r in results if r["split"] == split]
        shipped = [r for r in rs if case_verdict(r) != "not shipped"]
        expressible = [r for r in shipped if case_verdict(r) in ("found", "missed")]
        found = [r for r in shipped if case_verdict(r) == "found"]
        by_family = [r for r in shipped if case_verdict(r) == "found by the family"]
        out[split] = {
            "cases": len(rs),
            "shipped": len(shipped),
            "expressible": len(expressible),
            "found": len(found),
            "found_by_family": len(by_family),
            "lint_recall": round(len(found) / len(expressible), 3) if expressible else None,
            "family_recall": round((len(found) + len(by_family)) / len(shipped), 3) if shipped else None,
        }
    return out


def run_corpus(ctx: UpstreamContext, corpus: dict, case_ids: list[str] | None = None) -> dict:
    """Check every evidence line, lint every release the chosen cases name, judge each case.

    Raises CorpusError when a case id is unknown or an evidence line does not match its release."""
    cases = corpus["cases"]
    if case_ids:
        known = [c["id"] for c in cases]
        bad = [i for i in case_ids if i not in known]
        if bad:
            raise CorpusError(f"unknown case {', '.join(bad)}; known cases: {', '.join(known)}")
        cases = [c for c in cases if c["id"] in case_ids]
    versions = check_versions(ctx, corpus_releases(cases))
    trees = {v: release_tree(ctx, v) for v in versions}
    problems = [p for c in cases for p in evidence_problems(c, trees.__getitem__)]
    if problems:
        raise CorpusError("evidence does not match the released sources:\n  " + "\n  ".join(problems))
    analyses: dict[str, dict] = {}
    family: dict[str, list[dict]] = {}

    def findings_of(v: str) -> list[dict]:
        if v not in analyses:
            ctx.log(f"[corpus] lint {trees[v].label}")
            analyses[v] = analyse(trees[v])
        return analyses[v]["findings"]

    def family_of(v: str) -> list[dict]:
        if v not in family:
            findings_of(v)
            family[v] = analyse_family(trees[v], analyses[v])["findings"]
        return family[v]

    results = [judge_case(c, findings_of, family_of) for c in cases]
    return {"split_rule": corpus["split_rule"], "cases": results, "figures": figures(results)}


def format_corpus(result: dict) -> str:
    """One line per case, then the recall per split."""
    head = ("case", "split", "buggy releases", "expected", "verdict")
    rows = []
    for r in result["cases"]:
        e = r["expected"]
        want = f"{e['backend']}|{e['mode']}|{e['spec_class']}|{e['attr']}" if e else "outside the contract"
        rows.append((r["id"], r["split"], " ".join(r["buggy"]) or "-", want, case_verdict(r)))
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(x, widths, strict=True)).rstrip() for x in [head, *rows]]
    for split, f in result["figures"].items():
        lint = "-" if f["lint_recall"] is None else f"{f['lint_recall']:.3f}"
        fam = "-" if f["family_recall"] is None else f"{f['family_recall']:.3f}"
        lines.append(
            f"{split}: {f['found']} found of {f['expressible']} the lint can express (recall {lint}); "
            f"{f['found']} + {f['found_by_family']} by the family analysis of {f['shipped']} shipped crashes "
            f"of the family (recall {fam}); {f['cases']} cases"
        )
    return "\n".join(lines)
