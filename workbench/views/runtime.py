"""What notebook 06 shows of the real runtime (the data: ``workbench.upstream.runtime.measurements``): its
runs, its CPU shims and device equivalences, and the workbench's own engine beside it, as tables."""

from __future__ import annotations

from workbench.run.record import RecordLike, record_json
from workbench.views.tables import Table


def runs_table(runs: dict) -> Table:
    """One row per role: status, where the idle rank crashed, equality with HF's greedy tokens, timings."""
    rows = []
    for role, r in runs.items():
        c = r.get("crash") or {}
        at = c.get("raised_at") or {}
        ref = r.get("reference") or {}
        t = r.get("timings") or {}
        rows.append(
            {
                "role": role,
                "status": r["status"],
                "rank / phase / mode / bs": f"{c['rank']} / {c['phase']} / {c['forward_mode']} / {c['batch_size']}"
                if c
                else "",
                "exception": f"{c['exception_type']}: {c['message']}"
                if c
                else (r.get("error") or {}).get("message", ""),
                "raised at": f"{at.get('file')}:{at.get('line')}" if at else "",
                "= HF greedy": ref.get("equal", ""),
                "accept length": (r.get("metrics") or {}).get("accept_length_mean", ""),
                "ranks s": t.get("ranks_s"),
                "left running": (r.get("processes") or {}).get("left_running"),
            }
        )
    return Table(rows)


def shims_table(rec: dict) -> Table:
    """One row per CPU shim of a run: installed or not, the upstream lines it passes, what it uses, why."""
    return Table(
        [
            {
                "shim": s["name"],
                "installed": s["installed"],
                "upstream line": ", ".join(s["upstream"]) or s.get("reason"),
                "uses": s.get("uses") or "",
                "why": s["why"],
            }
            for s in rec.get("shims", [])
        ]
    )


def equivalences_table(rec: dict) -> Table:
    """One row per device equivalence of a run: installed or not, the release lines of the branch, both branches."""
    return Table(
        [
            {
                "equivalence": e["name"],
                "installed": e["installed"],
                "upstream lines": ", ".join(e.get("upstream") or []) or e.get("reason", ""),
                "CPU branch (made for intel_amx)": e["cpu_branch"],
                "CUDA branch taken": e["cuda_branch"],
                "function": e["function"],
            }
            for e in rec.get("equivalences", [])
        ]
    )


def side_by_side(workbench_runs: dict, runtime_runs: dict) -> Table:
    """One row per code state: how the workbench engine's run ended and the real runtime's (a workbench run is
    a ``RunRecord``, a ``RunResult`` or a JSON form; a runtime run its JSON form)."""

    def cell(r: RecordLike | None) -> str:
        if r is None:
            return "-"
        r = record_json(r)
        c = r.get("crash")
        if not c:
            return r["status"]
        return f"crashed: rank {c['rank']} {c['phase']} {c['forward_mode']} bs {c['batch_size']}: {c['message']}"

    states = (
        ("as released, DP 2", "pr-28221 (release 0.5.14's classes)", "dp2"),
        ("#24860 without #28221, DP 2", "pr-24860", "between+verify-input"),
        ("#28221's fix applied, DP 2", "pr-28221", "between+verify-input+pr-28221"),
    )
    return Table(
        [
            {
                "code state": s,
                "workbench engine": cell(workbench_runs.get(w)),
                "real SGLang runtime": cell(runtime_runs.get(r)),
            }
            for s, w, r in states
        ]
    )
