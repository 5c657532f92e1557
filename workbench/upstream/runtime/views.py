"""What notebook 06 shows: the real runtime's runs (live, or the shipped measurement labelled with its
date, commit and versions), their shims, the workbench's own engine beside them, and the checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

from workbench.notebook import Table

from .run import load_prompts

__all__ = ["load_prompts", "load_runs", "problems", "runs_table", "save_record", "shims_table", "side_by_side"]

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "runtime_runs.json"
# What each role must end as. triton reads spec_info.kv_indptr on idle batches. torch_native does not run
# SGLang's EAGLE: it has no multi-step draft backend (the lane gives the draft triton, as
# --speculative-draft-attention-backend does), its forward_extend needs extend_prefix_lens, which a
# TARGET_VERIFY batch does not carry (dp1 stops at the first verify), and it defines no DP padding
# fill value (dp2 stops at the idle rank's first padded batch, the prefill).
_AE, _NI = "AttributeError", "NotImplementedError"
EXPECTED = {
    "triton": {
        "dp2": ("crashed", "verify", "EagleVerifyInput", _AE),
        "dp2+verify-input": ("ok", None, None, None),
        "dp1": ("ok", None, None, None),
        "between+verify-input": ("crashed", "draft-extend", "EagleDraftExtendInput", _AE),
        "between+verify-input+pr-28221": ("ok", None, None, None),
    },
    "torch_native": {
        "dp2": ("crashed", "prefill", None, _NI),
        "dp1": ("crashed", "verify", "EagleVerifyInput", _AE),
    },
}


def load_runs(
    release: str, backend: str, roles: list[str] | None = None, live: bool = False, cache_dir: str | None = None
) -> dict:
    """{"runs": role -> record, "source": label}: measured now (``live``), else the shipped file."""
    roles = list(roles or EXPECTED[backend])
    if live:
        from .suite import run_roles

        return {
            "runs": run_roles(release, backend, roles, Path(cache_dir) if cache_dir else None),
            "source": "measured now",
            "shipped": None,
        }
    doc = json.loads(SHIPPED.read_text())
    prov = doc["provenance"]
    runs = {r: doc["runs"][f"{release}/{backend}/{r}"] for r in roles if f"{release}/{backend}/{r}" in doc["runs"]}
    missing = [r for r in roles if r not in runs]
    if missing:
        have = sorted({k.rsplit("/", 1)[0] for k in doc["runs"]})
        raise KeyError(f"no shipped run for {release}/{backend} roles {missing}; shipped: {have}; use live=True")
    pk = next(iter(runs.values()))["env"].get("packages", {})
    versions = ", ".join(f"{k} {pk.get(k)}" for k in ("sglang", "torch", "triton", "transformers"))
    label = f"shipped measurement ({prov['generated_at']}, commit {prov['commit']}, {versions}; {prov['command']})"
    return {"runs": runs, "source": label, "shipped": prov}


def runs_table(runs: dict) -> Table:
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


def sglang_frames(rec: dict) -> list[str]:
    """The crash's frames in sglang's own files (scheduler, worker, runner, backend), outermost first,
    as ``sglang/<path>:<line> in <function>``: the code line below each."""
    out = []
    lines = (rec.get("crash") or {}).get("traceback", "").splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r'\s*File "(?:.*/)?(sglang/[^"]+)", line (\d+), in (\S+)', ln)
        if m and "/sglang/" in ln:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            out.append(f"{m.group(1)}:{m.group(2)} in {m.group(3)}: {code}")
    return out


def side_by_side(workbench_runs: dict, runtime_runs: dict) -> Table:
    """One row per code state: the workbench engine's outcome and the real runtime's."""

    def cell(r: dict | None) -> str:
        if r is None:
            return "-"
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


def problems(runs: dict, backend: str) -> list[str]:
    """Roles that did not end as expected, outputs that differ from HF or DP 1, guard findings, leftovers."""
    out = []
    for role, r in runs.items():
        if role not in EXPECTED[backend]:
            out.append(f"{role}: no expectation on {backend} (roles there: {', '.join(EXPECTED[backend])})")
            continue
        want, phase, cls, exc = EXPECTED[backend][role]
        c = r.get("crash") or {}
        got = (c.get("phase"), c.get("spec_info"), c.get("exception_type"))
        if r["status"] != want:
            said = c.get("message") or (r.get("error") or {}).get("message", "")
            out.append(f"{role}: expected {want}, got {r['status']} {said}")
        elif want == "crashed" and got != (phase, cls, exc):
            out.append(f"{role}: crashed as {got}, expected {(phase, cls, exc)}")
        elif want == "ok" and not (r.get("reference") or {}).get("equal"):
            out.append(f"{role}: outputs differ from HF transformers' greedy tokens")
        if (r.get("shim_guard") or {}).get("violations"):
            out.append(f"{role}: a shim reached protected code: {r['shim_guard']['violations']}")
        if (r.get("processes") or {}).get("left_running"):
            out.append(f"{role}: processes left running {r['processes']['left_running']}")
    base = runs.get("dp1", {}).get("outputs")
    for role, r in runs.items():
        if r["status"] == "ok" and base is not None and r["outputs"] != base:
            out.append(f"{role}: outputs differ from the DP 1 run")
    return out


def save_record(path: str, params: dict, data: dict, workbench_runs: dict, found: list[str]) -> Path:
    """The notebook record: every runtime run (role ``runtime/<role>``), the workbench's runs
    (``workbench/<revision>``) and a ``checks`` record (ok, or mismatch with the problems)."""
    from workbench.notebook import save_bundle

    checks = {
        "status": "ok" if not found else "mismatch",
        "crash": None,
        "problems": found,
        "config": {"backend": params.get("backend"), "kernel": None, "source": data["source"]},
    }
    runs = {f"runtime/{k}": v for k, v in data["runs"].items()}
    runs.update({f"workbench/{k}": v for k, v in workbench_runs.items()})
    runs["checks"] = checks
    return save_bundle(path, "06_real_runtime", params, runs, primary="checks")
