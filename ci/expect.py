"""Verdicts: a cell's notebook ran and its runs ended as expected; output parity across cells;
accept length against the previous night. Each check returns reasons (strings), never raises."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from workbench.run.record import CRASH_FIELDS as RECORD_CRASH_FIELDS
from workbench_ci.history import params_of
from workbench_ci.matrix import EXPECT_FIELDS, PRIMARY

if TYPE_CHECKING:
    from workbench_ci.execute import Execution
    from workbench_ci.results import CellResult

# compared with the record's crash as is; raised_at (a dict in the record) by its "file:line"
CRASH_FIELDS = tuple(f for f in EXPECT_FIELDS if f in RECORD_CRASH_FIELDS and f != "raised_at")


def describe(record: dict | None) -> str:
    """``ok`` or ``crashed AttributeError (rank 1, draft-extend, IDLE): message``."""
    if record is None:
        return "no run"
    crash = record.get("crash")
    if not crash:
        return record.get("status", "?")
    where = ", ".join(
        f"{label}{crash[k]}"
        for k, label in (("rank", "rank "), ("phase", ""), ("forward_mode", ""))
        if crash.get(k) is not None
    )
    return f"{record.get('status')} {crash.get('exception_type')} ({where}): {str(crash.get('message'))[:160]}"


def describe_expect(want: dict) -> str:
    """``crashed [exception_type='AttributeError', rank=1, ...]``."""
    extra = ", ".join(f"{k}={want[k]!r}" for k in (*CRASH_FIELDS, "message_contains", "raised_at") if k in want)
    return want["status"] + (f" [{extra}]" if extra else "")


def check_run(want: dict, record: dict) -> list[str]:
    """Fields of ``record`` that differ from ``want``."""
    got = []
    if record.get("status") != want["status"]:
        got.append(f"status {record.get('status')!r}")
    crash = record.get("crash") or {}
    for k in CRASH_FIELDS:
        if k in want and crash.get(k) != want[k]:
            got.append(f"{k} {crash.get(k)!r}")
    if "message_contains" in want and want["message_contains"] not in str(crash.get("message")):
        got.append(f"message {str(crash.get('message'))[:120]!r}")
    at = crash.get("raised_at") or {}
    where = f"{at.get('file')}:{at.get('line')}"
    if "raised_at" in want and not where.endswith(want["raised_at"]):
        got.append(f"raised_at {where!r}")
    return got


def _roles(role: str, nb_record: dict) -> list[str]:
    if role == "*":
        return sorted(nb_record["runs"])
    return [nb_record["primary"] if role == PRIMARY else role]


def check_cell(expect: dict[str, dict], execution: Execution, nb_record: dict | None) -> list[str]:
    """Reasons the cell is unexpected: the notebook did not end ok, no record, or a run ended otherwise."""
    reasons = []
    if execution.status != "ok":
        err = execution.error
        where = f" in cell {err.cell}" if err and err.cell is not None else ""
        ename, evalue = (err.ename, err.evalue) if err else (None, None)
        reasons.append(f"notebook {execution.status}{where}: {ename}: {str(evalue)[:400]}")
    if nb_record is None:
        reasons.append(
            f"notebook record unreadable: {execution.record_error}"
            if execution.record_error
            else "no notebook record at record_path (the notebook stopped before writing it)"
        )
        return reasons
    for role, want in expect.items():
        for name in _roles(role, nb_record):
            record = nb_record["runs"].get(name)
            if record is None:
                reasons.append(f"run {name!r}: missing from the notebook record (roles: {sorted(nb_record['runs'])})")
                continue
            diff = check_run(want, record)
            if diff:
                reasons.append(
                    f"run {name!r}: expected {describe_expect(want)}, got {'; '.join(diff)} — {describe(record)}"
                )
    return reasons


def ok_runs(cells: Iterable[CellResult]) -> Iterable[tuple[str, str, dict]]:
    """(cell name, role, record) of every ok run in the cells' notebook records."""
    for c in cells:
        for role, rec in c.runs().items():
            if rec.get("status") == "ok" and rec.get("outputs_sha256"):
                yield c.name, role, rec


def _key(cfg: dict, spec: bool) -> str:
    base = {k: cfg.get(k) for k in ("prompts", "max_new_tokens", "seed", "model_dir")}
    if spec:
        base.update(
            mode=cfg.get("mode"),
            **({k: cfg.get(k) for k in ("steps", "topk", "draft_tokens")} if cfg.get("mode") == "eagle" else {}),
        )
    return json.dumps(base, sort_keys=True)


def _odd_ones(groups: dict[str, list[tuple[str, str, str]]], what: str) -> dict[str, list[str]]:
    reasons: dict[str, list[str]] = defaultdict(list)
    for members in groups.values():
        counts = Counter(sha for _, _, sha in members)
        if len(counts) < 2:
            continue
        majority, n = max(sorted(counts.items()), key=lambda kv: kv[1])
        example = next(f"{c} [{r}]" for c, r, sha in members if sha == majority)
        for cell, role, sha in members:
            if sha != majority:
                reasons[cell].append(
                    f"{what}: run {role!r} outputs_sha256 {sha[:12]} differs from {n} ok run(s) "
                    f"with the same settings, e.g. {example} ({majority[:12]})"
                )
    return reasons


def check_parity(cells: list[CellResult]) -> dict[str, list[str]]:
    """Ok runs with the same mode, spec settings, prompts, length, seed and models must agree on
    outputs_sha256, whatever their backend, revision or dp size."""
    groups: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for cell, role, rec in ok_runs(cells):
        groups[_key(rec["config"], spec=True)].append((cell, role, rec["outputs_sha256"]))
    return _odd_ones(groups, "output parity")


def check_lossless(cells: list[CellResult]) -> dict[str, list[str]]:
    """Ok EAGLE3 runs must produce the greedy runs' outputs for the same prompts, length, seed and models;
    an ok EAGLE3 run without such a greedy run is a failure too (never skipped)."""
    greedy: dict[str, Counter] = defaultdict(Counter)
    runs = list(ok_runs(cells))
    for _cell, _role, rec in runs:
        if rec["config"].get("mode") == "greedy":
            greedy[_key(rec["config"], spec=False)][rec["outputs_sha256"]] += 1
    reasons: dict[str, list[str]] = defaultdict(list)
    for cell, role, rec in runs:
        if rec["config"].get("mode") != "eagle":
            continue
        ref = greedy.get(_key(rec["config"], spec=False))
        if not ref:
            reasons[cell].append(
                f"lossless: EAGLE3 run {role!r} has no plain greedy run with the same prompts, "
                "length, seed and models to compare with (add a greedy reference cell to the matrix)"
            )
        else:
            want = ref.most_common(1)[0][0]
            if rec["outputs_sha256"] != want:
                reasons[cell].append(
                    f"lossless: EAGLE3 run {role!r} outputs_sha256 {rec['outputs_sha256'][:12]} "
                    f"differs from plain greedy's {want[:12]} on the same prompts"
                )
    return reasons


def check_accept_length(
    cells: list[CellResult], previous: dict[tuple[str, str, str], tuple[float, str]], tolerance: float
) -> dict[str, list[str]]:
    """Mean accept length of each ok EAGLE3 run may fall at most ``tolerance`` below the last
    night that ran the same cell and role with the same parameters and models (``workbench_ci.history.params_of``);
    a run whose parameters or models changed has no such night and starts a new baseline."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for cell, role, rec in ok_runs(cells):
        now = (rec.get("metrics") or {}).get("accept_length_mean")
        before = previous.get((cell, role, params_of(rec)[0]))
        if rec["config"].get("mode") != "eagle" or now is None or before is None:
            continue
        if before[0] - now > tolerance:
            reasons[cell].append(
                f"accept length: run {role!r} mean {now:.3f} is {before[0] - now:.3f} below night "
                f"{before[1]}'s {before[0]:.3f} (tolerance {tolerance}; same parameters and models)"
            )
    return reasons


def parity_groups(cells: list[CellResult]) -> list[dict]:
    """For the report: ok runs grouped by the parity key, one row per distinct outputs_sha256."""
    groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for _, _, rec in ok_runs(cells):
        groups[_key(rec["config"], spec=True)][rec["outputs_sha256"]].append(rec["config"])
    rows = []
    for key, by_sha in groups.items():
        k = json.loads(key)
        spec = f" steps {k['steps']} topk {k['topk']} draft tokens {k['draft_tokens']}" if k["mode"] == "eagle" else ""
        settings = f"{k['mode']}{spec}, {len(k['prompts'] or [])} prompt(s), {k['max_new_tokens']} new tokens"
        for sha, cfgs in by_sha.items():
            rows.append(
                {
                    "settings": settings,
                    "outputs_sha256": sha[:16],
                    "runs": len(cfgs),
                    "agree": len(by_sha) == 1,
                    "backends": ", ".join(sorted({c["backend"] for c in cfgs})),
                    "revisions": ", ".join(
                        sorted({c["revision"] + (" + fix" if c.get("apply_fix_in_place") else "") for c in cfgs})
                    ),
                    "dp": ", ".join(str(d) for d in sorted({c["dp"] for c in cfgs})),
                }
            )
    return rows
