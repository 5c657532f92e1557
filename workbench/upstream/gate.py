"""The gate: which findings fail a lint or a lane, judged against the reviewed triage file; exit codes.

Exit codes of `workbench upstream lint` and `workbench upstream nightly`: 0 nothing fails; 1 findings
fail the gate; 2 the check could not run or could not be trusted (a bad argument or triage file, an
environment that could not be built, a covered file that cannot be read or parsed, a lint that read no
backend, a replay that did not run, a finding without a verdict, any unexpected exception): a check
that could not run never passes.

The triage key is `backend|mode|class|attribute|reading function|install site` (`triage_keys`): one
per place that installs the class in that mode (`file:function` below `sglang/srt/`), so a new way to
reach a known read is a new key. Every entry is reviewed: a `status` (`live-filed` with its upstream
link, `live-unfiled` with its shipped reproducer folder, `accepted` or `false-positive`, each with a
`reason`) and `decided_by` (who or what decided it).

`--fail-on new` fails a finding when, for any of its keys:
- the key is not in the file (named "a new install site" when another key of the same read is);
- it reappears in a release at or after the entry's `fixed_in`;
- the replay now raises (confirmed, confirmed end to end, traced: raised) or confirms it and the
  entry's verdict does not;
- it is `unverified` and its entry does not say why (the entry's verdict is not `unverified`);
- it is confirmed and the entry says `false-positive`;
- it is confirmed on the newest release and the entry is not live (`live-filed` with an https link,
  or `live-unfiled` whose link is the repository path of its shipped reproducer folder, which must
  hold that finding's `repro.py`, `fix.diff` and a `result.json` naming it).
`--fail-on confirmed` fails every confirmed finding and every `unverified` one whose entry does not
say why; `--fail-on any` every finding. Findings on the newest release that raised (confirmed or
traced: raised) are listed with their status (`live_rows`), so none passes silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from workbench.run.serialise import RecordError, from_dict, to_dict

from .static.finding import AnyFinding, Finding

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
RAISED = (*CONFIRMED, "traced: raised")  # a real read that raised: listed with its status on the newest release
STATUSES = ("live-filed", "live-unfiled", "accepted", "false-positive")
LIVE = ("live-filed", "live-unfiled")
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
TRIAGE_FILE = Path(__file__).resolve().parent.parent / "assets" / "upstream_triage.json"
ROOT = Path(__file__).resolve().parents[2]  # the folder holding workbench/: reproducer links are relative to it
REPRO_FILES = ("repro.py", "fix.diff", "result.json")
SCHEMA = "upstream-triage/3"
OLD_SCHEMA = "upstream-triage/2"  # keys without the install site: `workbench upstream triage --migrate`
SRT = "sglang/srt/"


class GateError(ValueError):
    """A usage or environment error: the gate cannot judge (exit 2)."""


@dataclass
class TriageEntry:
    """One reviewed triage key: the verdict it was reviewed at, the review (``status``, ``reason``,
    ``decided_by``, ``link``) and ``fixed_in``; a candidate (``propose_triage``) has ``status`` None and
    says in ``review`` why it needs one."""

    verdict: str
    status: str | None = None
    reason: str | None = None
    decided_by: str | None = None
    link: str | None = None
    fixed_in: str | None = None
    releases: list[str] = field(default_factory=list)
    verdict_reason: str | None = None
    read: str | None = None  # file:line of the read
    install: str | None = None  # the install site, as in the key
    note: str | None = None
    review: str | None = None


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def install_site(file: str | None, function: str | None) -> str:
    """`file:function` of an install, the file below `sglang/srt/` (no line: stable across releases)."""
    return f"{(file or '?').removeprefix(SRT)}:{function or '<module>'}"


@dataclass
class Failing:
    """A finding that fails the gate, and why (`gate`: one line for all its keys); its JSON form is the
    finding's with a `gate` key (`as_json`)."""

    finding: AnyFinding
    gate: str

    def as_json(self) -> dict:
        """The finding's JSON form with `gate` last."""
        return {**to_dict(self.finding), "gate": self.gate}


def triage_keys(f: AnyFinding) -> list[str]:
    """The triage keys of a finding: its read key (`f.key`) and each install site, sorted, one per site.

    Read from `installs` (the lint's list), else `install_sites` (the shipped findings), else the
    first install (`install_file`, `install_function`)."""
    if isinstance(f, Finding) and f.installs:
        sites = {install_site(i.file, i.function) for i in f.installs}
    elif not isinstance(f, Finding) and f.install_sites:
        sites = set(f.install_sites)
    else:
        sites = {install_site(f.install_file, f.install_function)}
    return [f"{f.key}|{s}" for s in sorted(sites)]


def read_key(key: str) -> str:
    """The finding key (`backend|mode|class|attribute|reading function`) of a triage key."""
    return key.rsplit("|", 1)[0]


def _entry_problems(key: str, e: TriageEntry) -> list[str]:
    bad = []
    if len(key.split("|")) != 6:
        bad.append("key is not backend|mode|class|attribute|reading function|install site")
    if e.verdict not in VERDICTS:
        bad.append(f"verdict {e.verdict!r} is none of {', '.join(VERDICTS)}")
    status, link = e.status, e.link
    if status not in STATUSES:
        bad.append(f"status {status!r} is none of {', '.join(STATUSES)} (not reviewed)")
    if not e.reason:
        bad.append("no reason")
    if not e.decided_by:
        bad.append("no decided_by")
    if status == "live-filed" and not str(link or "").startswith("https://"):
        bad.append(f"live-filed needs an https link to the upstream issue or PR, not {link!r}")
    if status == "live-unfiled":
        if not link or str(link).startswith("https://"):
            bad.append(f"live-unfiled needs its reproducer folder (a repository path) as link, not {link!r}")
        elif Path(link).is_absolute() or ".." in Path(link).parts:
            bad.append(f"link {link!r}: a reproducer folder is a path relative to the repository, inside it")
    if status in ("accepted", "false-positive") and link is not None and not str(link).startswith("https://"):
        bad.append(f"link {link!r} is not an https address")
    if e.fixed_in is not None and _version(e.fixed_in) is None:
        bad.append(f"fixed_in {e.fixed_in!r} is not a version")
    return bad


def load_triage(path: Path | None = None) -> dict[str, TriageEntry]:
    """{triage key: entry} from a reviewed triage file, every entry checked (GateError names the bad one)."""
    path = Path(path or TRIAGE_FILE)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GateError(f"triage file {path}: {exc}") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema == OLD_SCHEMA:
        raise GateError(
            f"triage file {path}: schema {OLD_SCHEMA!r} has keys without the install site and entries without a "
            f"reviewed status; convert it once with `workbench upstream triage --migrate {path} --findings FINDINGS "
            f"--out NEW` and review NEW's entries"
        )
    if schema != SCHEMA:
        raise GateError(f"triage file {path}: schema {schema!r}, expected {SCHEMA!r}")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise GateError(f"triage file {path}: no 'entries' object")
    out = {}
    for key, e in entries.items():
        if not isinstance(e, dict):
            raise GateError(f"triage file {path}: entry {key!r}: is {type(e).__name__}, not an object")
        try:
            entry = from_dict(TriageEntry, e, "TriageEntry")
        except RecordError as exc:
            raise GateError(f"triage file {path}: entry {key!r}: {exc}") from None
        bad = _entry_problems(key, entry)
        if bad:
            raise GateError(f"triage file {path}: entry {key!r}: {'; '.join(bad)}")
        out[key] = entry
    return out


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


def _reappeared(f: AnyFinding, entry: TriageEntry) -> str | None:
    fixed, have = _version(entry.fixed_in), _version(f.release)
    if fixed is not None and (have is None or have >= fixed):
        link = f" ({entry.link})" if entry.link else ""
        return f"reappeared: fixed in {entry.fixed_in}{link}, found again in {f.release or f.source}"
    return None


def why_new(
    f: AnyFinding,
    key: str,
    entry: TriageEntry | None,
    newest: str | None,
    known_reads: dict[str, list[TriageEntry]] | None = None,
) -> str | None:
    """Why `f` fails `--fail-on new` on its triage key `key`, or None when the entry covers it.
    `known_reads`: the triage file's entries by read key (`reads_of`), to name a new install site."""
    site = key.rsplit("|", 1)[-1]
    if entry is None:
        siblings = (known_reads or {}).get(read_key(key), [])
        fixed = [e for e in siblings if _version(e.fixed_in)]
        latest = max(fixed, key=lambda e: _version(e.fixed_in)) if fixed and len(fixed) == len(siblings) else None
        back = _reappeared(f, latest) if latest else None  # the read itself was fixed: every site of it was
        if back:
            return f"{back}, through a new install site {site}"
        if siblings:
            return f"new: install site {site} (a new way to reach a read the triage file knows)"
        return f"new: not in the triage file (install site {site})"
    back = _reappeared(f, entry)
    if back:
        return back
    verdict = f.verdict
    if verdict in CONFIRMED and entry.verdict not in CONFIRMED:
        return f"a replay now confirms it; the triage file says {entry.verdict}"
    if verdict in RAISED and entry.verdict not in RAISED:
        return f"the read now raises ({verdict}); the triage file says {entry.verdict}"
    if verdict == "unverified" and entry.verdict != "unverified":
        return (
            f"unverified ({f.verdict_reason}), and its triage entry does not say why (it was reviewed as "
            f"{entry.verdict})"
        )
    if verdict in CONFIRMED and entry.status == "false-positive":
        return f"confirmed, and its triage entry says false-positive ({entry.reason})"
    if verdict in CONFIRMED and is_newest(f.release, newest):
        status, link = entry.status, entry.link
        if status not in LIVE:
            return (
                f"confirmed on the newest release, and its triage entry says {status}, not live-filed or live-unfiled"
            )
        if status == "live-unfiled":
            problem = reproducer_problem(link, f.key) if link else "no reproducer folder"
            if problem:
                return f"confirmed on the newest release, live, not filed upstream, and {problem}"
    return None


def reads_of(triage: dict[str, TriageEntry]) -> dict[str, list[TriageEntry]]:
    """The triage file's entries grouped by read key (every install site of one read)."""
    out: dict[str, list[TriageEntry]] = {}
    for key, e in triage.items():
        out.setdefault(read_key(key), []).append(e)
    return out


def _unverified_why(f: AnyFinding, triage: dict[str, TriageEntry]) -> str | None:
    """Why an `unverified` finding fails `--fail-on confirmed`: a key whose entry does not say why, or None."""
    for key in triage_keys(f):
        entry = triage.get(key)
        if entry is None or entry.verdict != "unverified":
            return f"--fail-on confirmed: unverified ({f.verdict_reason}) and no triage entry says why ({key})"
    return None


def judge(
    findings: list[AnyFinding], triage: dict[str, TriageEntry], fail_on: str, newest: str | None
) -> list[Failing]:
    """The findings that fail the gate, each with its `gate` reason (one line for all its keys)."""
    if fail_on not in FAIL_ON:
        raise GateError(f"--fail-on {fail_on!r}: choose one of {', '.join(FAIL_ON)}")
    known_reads = reads_of(triage)
    failing = []
    for f in findings:
        if fail_on == "any":
            why = "--fail-on any: a finding"
        elif fail_on == "confirmed":
            why = f"--fail-on confirmed: {f.verdict}" if f.verdict in CONFIRMED else None
            if f.verdict == "unverified":
                why = _unverified_why(f, triage)
        else:
            reasons: list[str] = []
            for key in triage_keys(f):
                r = why_new(f, key, triage.get(key), newest, known_reads)
                if r and r not in reasons:
                    reasons.append(r)
            why = "; ".join(reasons) or None
        if why:
            failing.append(Failing(f, why))
    return failing


def live_rows(findings: list[AnyFinding], triage: dict[str, TriageEntry], newest: str | None) -> list[dict]:
    """Every read that raised (confirmed, confirmed end to end, traced: raised) on the newest release, one
    row per triage key: {key, finding, read, verdict, status, link, reason} (status None: no entry)."""
    out: dict[str, dict] = {}
    for f in findings:
        if f.verdict not in RAISED or not is_newest(f.release, newest):
            continue
        for key in triage_keys(f):
            e = triage.get(key) or TriageEntry(verdict=f.verdict)
            out.setdefault(
                key,
                {
                    "key": key,
                    "finding": f.key,
                    "read": f.read_at,
                    "verdict": f.verdict,
                    "status": e.status,
                    "link": e.link,
                    "reason": e.reason,
                },
            )
    return list(out.values())


def live_lines(rows: list[dict]) -> list[str]:
    """One line per row of `live_rows`."""
    return [
        f"live ({r['verdict']}), {r['status'] or 'no triage entry'}: {r['key']} at {r['read']}"
        + (f": {r['link']}" if r["link"] else f": {r['reason']}" if r["reason"] else "")
        for r in rows
    ]


def by_status(rows: list[dict]) -> dict[str, int]:
    """How many `live_rows` per status."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"] or "none"] = counts.get(r["status"] or "none", 0) + 1
    return counts


def not_filed(findings: list[AnyFinding], triage: dict[str, TriageEntry], newest: str | None) -> list[dict]:
    """The confirmed findings on the newest release that pass only as "live, not filed upstream":
    {key (the finding's), read, link (the reproducer folder), note}, one per finding key."""
    known_reads = reads_of(triage)
    out: dict[str, dict] = {}
    for f in findings:
        if f.verdict not in CONFIRMED or not is_newest(f.release, newest):
            continue
        keys = triage_keys(f)
        entries = [triage.get(k) for k in keys]
        if any(e is None or e.status != "live-unfiled" for e in entries):
            continue
        if any(why_new(f, k, e, newest, known_reads) for k, e in zip(keys, entries, strict=True)):
            continue
        out.setdefault(f.key, {"key": f.key, "read": f.read_at, "link": entries[0].link, "note": entries[0].note})
    return list(out.values())


def not_filed_lines(rows: list[dict]) -> list[str]:
    """One "live, not filed upstream" line per row of `not_filed`."""
    return [f"live, not filed upstream: {r['key']} at {r['read']}: reproducer and fix in {r['link']}" for r in rows]


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
        for bad in lint.get("unparsed") or []:
            problems.append(
                f"{src}: {bad['file']} cannot be read or parsed ({bad['error']}): the lint cannot vouch for it"
            )
        if replay:
            rep = r.get("replay") or {}
            if rep.get("status") != "ok":
                problems.append(f"{src}: the replay did not run: {rep.get('status')}: {rep.get('message')}")
            unjudged = [f.key for f in r["findings"] if not f.verdict]
            if unjudged:
                problems.append(f"{src}: {len(unjudged)} finding(s) got no verdict, e.g. {unjudged[0]}")
            e2e = r.get("end_to_end")
            if e2e and e2e.get("status") != "ok":
                problems.append(f"{src}: the real runtime could not decide a finding end to end: {e2e.get('message')}")
    return problems


def _order(sources: list[str]) -> list[str]:
    """The releases of `sources` once each, oldest first."""
    return sorted({s.replace("sglang ", "") for s in sources}, key=lambda v: _version(v) or Version("0"))


def propose_triage(
    findings: list[AnyFinding],
    sources: list[str],
    previous: dict[str, TriageEntry],
    command: str,
    commit: str | None,
    at: str,
) -> dict:
    """A candidate triage file (to review, never the shipped one) from findings over `sources`.

    Per triage key: the releases it appears in, the newest one's verdict and its reason
    (`verdict_reason`), read and install; `fixed_in` the first source after its last appearance (None
    while it is there). A reviewed entry of `previous` with the same key and verdict keeps its status,
    reason, decided_by, link and note; every other entry has `status: null` and says in `review` why it
    needs one (the gate refuses a file with an unreviewed entry).
    """
    order = _order(sources)
    entries: dict[str, TriageEntry] = {}
    for f in findings:
        rel = f.release or f.source.replace("sglang ", "")
        for key in triage_keys(f):
            e = entries.setdefault(key, TriageEntry(verdict="unverified"))
            if rel not in e.releases:
                e.releases.append(rel)
            e.verdict = f.verdict or "unverified"
            e.verdict_reason = f.verdict_reason or "linted without a replay"
            e.read, e.install = f.read_at, key.rsplit("|", 1)[-1]
    for key, e in entries.items():
        last = max((order.index(r) for r in e.releases if r in order), default=len(order) - 1)
        later = order[last + 1 :]
        e.fixed_in = later[0] if later else None
        old = previous.get(key)
        if old is None:
            e.review = "new: not in the triage file"
        elif old.verdict != e.verdict:
            e.link = old.link
            e.review = f"the verdict changed from {old.verdict} to {e.verdict}: decide again"
        else:
            e.status, e.reason, e.decided_by = old.status, old.reason, old.decided_by
            e.link, e.note = old.link, old.note
    stale = sorted(set(previous) - set(entries))
    return {
        "schema": SCHEMA,
        "produced_by": {"command": command, "workbench_commit": commit, "generated_at": at, "candidate": True},
        "dropped": {k: "matches no finding of these sources" for k in stale},
        "entries": {k: to_dict(e) for k, e in sorted(entries.items())},
    }


def migrate_triage(old: dict, findings: list[AnyFinding], command: str, commit: str | None, at: str) -> dict:
    """A schema-2 triage document converted to schema 3 (one entry per install site) with `findings`
    that list their install sites (`installs` or `install_sites`). Each new key takes the verdict of its
    newest finding (an install site gone earlier keeps the verdict it had then) and `fixed_in` the first
    release of `findings` after its last appearance (None while the newest has it). An entry whose old
    record is live with an https link becomes `live-filed`, live with `filed_upstream: false`
    `live-unfiled`; every other one has `status: null` to be reviewed. Old keys no finding matches are
    listed under `dropped`."""
    if old.get("schema") != OLD_SCHEMA:
        raise GateError(f"--migrate: schema {old.get('schema')!r}, expected {OLD_SCHEMA!r}")
    entries: dict[str, dict] = {}
    order = _order(list({f.release or f.source for f in findings}))  # each release once
    for f in sorted(findings, key=lambda f: order.index((f.release or f.source).replace("sglang ", ""))):
        e_old = old["entries"].get(f.key)
        if e_old is None:
            continue
        for key in triage_keys(f):
            e = entries.setdefault(key, {"releases": []})
            rel = (f.release or f.source).replace("sglang ", "")
            if rel not in e["releases"]:
                e["releases"].append(rel)
            link = e_old.get("link")
            status = None
            if e_old.get("live") and str(link or "").startswith("https://"):
                status = "live-filed"
            elif e_old.get("live") and e_old.get("filed_upstream") is False:
                status = "live-unfiled"
            last = order.index(rel)
            e.update(
                verdict=f.verdict or e_old["verdict"],
                verdict_reason=f.verdict_reason or e_old.get("reason"),
                read=f.read_at,
                install=key.rsplit("|", 1)[-1],
                fixed_in=order[last + 1] if last + 1 < len(order) else None,
                status=status,
                reason=e_old.get("note") if status else None,
                decided_by=f"migrated from {OLD_SCHEMA} (its live/link fields)" if status else None,
                link=link,
            )
            if not status:
                e["review"] = f"migrated from {OLD_SCHEMA}: decide a status"
    seen = {f.key for f in findings}
    return {
        "schema": SCHEMA,
        "produced_by": {
            "command": command,
            "workbench_commit": commit,
            "generated_at": at,
            "migrated_from": OLD_SCHEMA,
        },
        "dropped": {k: "matches no finding" for k in sorted(set(old["entries"]) - seen)},
        "entries": dict(sorted(entries.items())),
    }


def stale_entries(triage: dict[str, TriageEntry], findings: list[AnyFinding]) -> list[str]:
    """Triage keys that match no finding (the triage file judges findings that are not there)."""
    have = {k for f in findings for k in triage_keys(f)}
    return sorted(set(triage) - have)


def unentried_live(triage: dict[str, TriageEntry], findings: list[AnyFinding], newest: str | None) -> list[str]:
    """Triage keys of confirmed findings on the newest release that have no entry."""
    return sorted(
        {
            k
            for f in findings
            if f.verdict in CONFIRMED and is_newest(f.release, newest)
            for k in triage_keys(f)
            if k not in triage
        }
    )
