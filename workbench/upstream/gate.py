"""The gate: which findings fail a lint or a lane, judged against the triage file; exit codes.

Exit codes of `workbench upstream lint --fail-on ...` and `workbench upstream nightly`:
0 nothing fails; 1 findings fail the gate; 2 a usage or environment error (a bad argument or
triage file, an environment that could not be built, a lint that read no backend, a replay that
errored): a check that could not run never passes.

`--fail-on new` fails on every finding the triage file does not cover:
- its key (`backend|mode|class|attribute|reading function`) is not in the file;
- it reappears in a release at or after the entry's `fixed_in`;
- a replay now confirms it and the entry says otherwise;
- it is `confirmed` on the newest release and the entry does not say it is known and live
  (`live: true`) with its `link`: an upstream https address, or, for a finding not filed upstream
  (`filed_upstream: false`), the repository path of its shipped reproducer folder, which must exist
  and hold that finding's reproducer (`repro.py`, `fix.diff`, a `result.json` naming its key).
  Such a finding passes and is reported as "live, not filed upstream" (`not_filed`).
`--fail-on confirmed` fails on every `confirmed` finding; `--fail-on any` on every finding.
`confirmed end to end` (the real runtime raised at the read: `--end-to-end`) counts as confirmed
everywhere; with `--end-to-end`, a real-runtime run that could not decide is an error (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .static.lint import finding_key

FAIL_ON = ("new", "confirmed", "any")
VERDICTS = (
    "confirmed",
    "confirmed end to end",
    "refuted",
    "unreachable",
    "traced: raised",
    "traced: not read",
    "unverified",
)
CONFIRMED = ("confirmed", "confirmed end to end")  # what the gate counts as confirmed
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
TRIAGE_FILE = Path(__file__).resolve().parent.parent / "assets" / "upstream_triage.json"
ROOT = Path(__file__).resolve().parents[2]  # the folder holding workbench/: reproducer links are relative to it
REPRO_FILES = ("repro.py", "fix.diff", "result.json")
SCHEMA = "upstream-triage/2"


class GateError(ValueError):
    """A usage or environment error: the gate cannot judge (exit 2)."""


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def load_triage(path: Path | None = None) -> dict[str, dict]:
    """{finding key: entry} from a triage file, each entry checked: verdict, reason, link, fixed_in, live."""
    path = Path(path or TRIAGE_FILE)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GateError(f"triage file {path}: {exc}") from None
    if doc.get("schema") != SCHEMA:
        raise GateError(f"triage file {path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise GateError(f"triage file {path}: no 'entries' object")
    for key, e in entries.items():
        bad = []
        if len(key.split("|")) != 5:
            bad.append("key is not backend|mode|class|attribute|reading function")
        if e.get("verdict") not in VERDICTS:
            bad.append(f"verdict {e.get('verdict')!r} is none of {', '.join(VERDICTS)}")
        if not e.get("reason"):
            bad.append("no reason")
        link = e.get("link")
        if link is not None and not str(link).startswith("https://"):
            if e.get("filed_upstream") is not False:
                bad.append(f"link {link!r} is not an https address (a reproducer path needs filed_upstream: false)")
            elif Path(link).is_absolute() or ".." in Path(link).parts:
                bad.append(f"link {link!r}: a reproducer folder is a path relative to the repository, inside it")
        if not isinstance(e.get("filed_upstream", True), bool):
            bad.append("filed_upstream is not true/false")
        if e.get("fixed_in") is not None and _version(e["fixed_in"]) is None:
            bad.append(f"fixed_in {e['fixed_in']!r} is not a version")
        if not isinstance(e.get("live", False), bool):
            bad.append("live is not true/false")
        if bad:
            raise GateError(f"triage file {path}: entry {key!r}: {'; '.join(bad)}")
    return entries


def is_newest(release: str | None, newest: str | None) -> bool:
    """Whether findings of `release` count as the newest release's (an unknown version counts)."""
    have, top = _version(release), _version(newest)
    return have is None or top is None or have >= top


def reproducer_problem(link: str, key: str) -> str | None:
    """Why the repository path `link` does not hold finding `key`'s shipped reproducer, or None."""
    folder = ROOT / link
    if not folder.is_dir():
        return f"its reproducer folder {link} does not exist"
    missing = [name for name in REPRO_FILES if not (folder / name).is_file()]
    if missing:
        return f"its reproducer folder {link} lacks {', '.join(missing)}"
    try:
        named = json.loads((folder / "result.json").read_text()).get("key")
    except ValueError as exc:
        return f"{link}/result.json: {exc}"
    return None if named == key else f"{link}/result.json is the reproducer of {named!r}, not of this finding"


def why_new(f: dict, entry: dict | None, newest: str | None) -> str | None:
    """Why `f` fails `--fail-on new`, or None when the triage entry covers it."""
    if entry is None:
        return "new: not in the triage file"
    fixed, have = _version(entry.get("fixed_in")), _version(f.get("release"))
    if fixed is not None and (have is None or have >= fixed):
        link = f" ({entry['link']})" if entry.get("link") else ""
        return f"reappeared: fixed in {entry['fixed_in']}{link}, found again in {f.get('release') or f['source']}"
    if f.get("verdict") in CONFIRMED and entry["verdict"] not in CONFIRMED:
        return f"a replay now confirms it; the triage file says {entry['verdict']}"
    if f.get("verdict") in CONFIRMED and is_newest(f.get("release"), newest):
        if not entry.get("live"):
            return "confirmed on the newest release, and its triage entry does not say it is known and live"
        link = entry.get("link")
        if not link:
            return (
                "confirmed on the newest release, known and live, but its triage entry has neither an upstream "
                "link nor a shipped reproducer folder"
            )
        if not str(link).startswith("https://"):
            problem = reproducer_problem(link, finding_key(f))
            if problem:
                return f"confirmed on the newest release, known and live, not filed upstream, and {problem}"
    return None


def not_filed(findings: list[dict], triage: dict[str, dict], newest: str | None) -> list[dict]:
    """The confirmed findings on the newest release that pass only as "live, not filed upstream":
    {key, read, link (the reproducer folder), note}, one per key."""
    out: dict[str, dict] = {}
    for f in findings:
        key = finding_key(f)
        entry = triage.get(key) or {}
        link = entry.get("link")
        if f.get("verdict") not in CONFIRMED or not is_newest(f.get("release"), newest) or not entry.get("live"):
            continue
        if link and not str(link).startswith("https://") and why_new(f, entry, newest) is None:
            read = f"{f['read_file']}:{f['read_line']}"
            out.setdefault(key, {"key": key, "read": read, "link": link, "note": entry.get("note")})
    return list(out.values())


def not_filed_lines(rows: list[dict]) -> list[str]:
    """One "live, not filed upstream" line per row of `not_filed`."""
    return [f"live, not filed upstream: {r['key']} at {r['read']}: reproducer and fix in {r['link']}" for r in rows]


def judge(findings: list[dict], triage: dict[str, dict], fail_on: str, newest: str | None) -> list[dict]:
    """The findings that fail the gate, each with a `gate` reason."""
    if fail_on not in FAIL_ON:
        raise GateError(f"--fail-on {fail_on!r}: choose one of {', '.join(FAIL_ON)}")
    failing = []
    for f in findings:
        if fail_on == "any":
            why = "--fail-on any: a finding"
        elif fail_on == "confirmed":
            why = f"--fail-on confirmed: {f['verdict']}" if f.get("verdict") in CONFIRMED else None
        else:
            why = why_new(f, triage.get(finding_key(f)), newest)
        if why:
            failing.append({**f, "gate": why})
    return failing


def ran_problems(result: dict, replay: bool) -> list[str]:
    """Why a `guard.check` result cannot be trusted (fail closed): empty when every step ran."""
    problems = []
    if not result.get("results"):
        problems.append("no source was linted")
    for r in result.get("results", []):
        lint, src = r["lint"], r["source"]
        if not lint["backend_classes"]:
            problems.append(f"{src}: the lint read no attention backend (no init_forward_metadata found)")
        if not lint["spec_inputs"]:
            problems.append(f"{src}: the lint found no spec-input class")
        if not lint["installs"]:
            problems.append(f"{src}: the lint found no install of a spec input")
        if not lint["forward_modes"]:
            problems.append(f"{src}: no ForwardMode enum in the sources")
        if replay:
            rep = r.get("replay") or {}
            if rep.get("status") != "ok":
                problems.append(f"{src}: the replay did not run: {rep.get('status')}: {rep.get('message')}")
            unjudged = [f["key"] for f in r["findings"] if not f.get("verdict")]
            if unjudged:
                problems.append(f"{src}: {len(unjudged)} finding(s) got no verdict, e.g. {unjudged[0]}")
            e2e = r.get("end_to_end")
            if e2e and e2e.get("status") != "ok":
                problems.append(f"{src}: the real runtime could not decide a finding end to end: {e2e.get('message')}")
    return problems


def build_triage(result: dict, previous: dict[str, dict] | None, command: str, commit: str | None) -> dict:
    """A triage file from a multi-release `guard.check` result (releases oldest first).

    Per key: the releases it appears in, the newest one's verdict and reason, read and install;
    `fixed_in` the first linted release after its last appearance (None while it is still there).
    `link`, `live`, `filed_upstream` and `note` carry over from `previous`, and its `fixed_in` unless a linted
    release at or after it still has the finding.
    """
    order = sorted(
        (r["source"].replace("sglang ", "") for r in result["results"]), key=lambda v: _version(v) or Version("0")
    )
    entries: dict[str, dict] = {}
    for f in result["findings"]:
        e = entries.setdefault(finding_key(f), {"releases": []})
        rel = f.get("release") or f["source"]
        if rel not in e["releases"]:
            e["releases"].append(rel)
        e.update(
            verdict=f.get("verdict") or "unverified",
            reason=f.get("verdict_reason") or "linted without a replay",
            read=f"{f['read_file']}:{f['read_line']}",
            install=f"{f['install_file']}:{f['install_line']}",
        )
    for key, e in entries.items():
        last = max(order.index(r) for r in e["releases"] if r in order)
        later = order[last + 1 :]
        old = (previous or {}).get(key, {})
        kept, seen = _version(old.get("fixed_in")), [_version(r) for r in e["releases"]]
        if kept is not None and not any(v is not None and v >= kept for v in seen):
            e["fixed_in"] = old["fixed_in"]  # a hand-set release the findings do not contradict
        else:
            e["fixed_in"] = later[0] if later else None
        e["link"] = old.get("link")
        e["live"] = bool(old.get("live", False))
        if "filed_upstream" in old:
            e["filed_upstream"] = old["filed_upstream"]
        if old.get("note"):
            e["note"] = old["note"]
    return {
        "schema": SCHEMA,
        "produced_by": {"command": command, "workbench_commit": commit, "generated_at": result["generated_at"]},
        "entries": dict(sorted(entries.items())),
    }
