"""What notebook 06 reads: the real runtime's runs (live, or the shipped measurement labelled with its
date, commit and versions), what each role must end as, the checks, and the notebook record's runs (the
tables: ``workbench.views.runtime``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from workbench.run.serialise import from_dict

from .release_record import RuntimeRecord
from .release_run import load_prompts

__all__ = [
    "EXPECTED",
    "NEWEST_RELEASE",
    "V1_RELEASE",
    "V1_ROLES",
    "default_roles",
    "load_prompts",
    "load_runs",
    "notebook_runs",
    "problems",
    "sglang_frames",
]

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "runtime_runs.json"
# What each role must end as. triton reads spec_info.kv_indptr on idle batches. torch_native does not run
# SGLang's EAGLE: it has no multi-step draft backend (the real runtime gives the draft triton, as
# --speculative-draft-attention-backend does), its forward_extend needs extend_prefix_lens, which a
# TARGET_VERIFY batch does not carry (dp1 stops at the first verify: an upstream crash, sglang #36352), and it
# defines no DP padding fill value (dp2 stops at the first padded batch, the prefill).
_AE, _NI = "AttributeError", "NotImplementedError"
EXPECTED = {
    "triton": {
        "dp2": ("crashed", "verify", "EagleVerifyInput", _AE),
        "dp2+verify-input": ("ok", None, None, None),
        "dp1": ("ok", None, None, None),
        "between+verify-input": ("crashed", "draft-extend", "EagleDraftExtendInput", _AE),
        "between+verify-input+pr-28221": ("ok", None, None, None),
        # 0.5.12's V1 worker (suite.ROLES): asked for by name
        "v1-dp2": ("crashed", "draft", "EagleDraftInput", _AE),
        "v1-dp1": ("ok", None, None, None),
        "v1-dp2+triton-idle-fallback+verify-input": ("crashed", "draft-extend", "EagleDraftExtendInput", _AE),
        "v1-dp2+triton-idle-fallback+verify-input+pr-28221": ("ok", None, None, None),
        # the other algorithms (suite.ROLES): asked for by name
        "eagle-dp1": ("ok", None, None, None),
        "eagle-dp2": ("crashed", "draft-extend", "EagleDraftExtendInput", "RuntimeError"),
        "eagle-dp2+eagle-idle-batch+verify-input": ("ok", None, None, None),
        "standalone-dp1": ("ok", None, None, None),
    },
    "torch_native": {
        "dp2": ("crashed", "prefill", None, _NI),
        "dp1": ("crashed", "verify", "EagleVerifyInput", _AE),
    },
}
# The roles a release's runs are read by when none are named: the standard ones, or, for 0.5.12 (whose
# --disable-overlap-schedule picks the V1 worker, the one that installs the idle draft-extend input), the V1 ones.
BY_NAME = ("v1-", "eagle-", "standalone-")  # role prefixes run only when asked for
STANDARD = {backend: [r for r in roles if not r.startswith(BY_NAME)] for backend, roles in EXPECTED.items()}
V1_ROLES = [r for r in EXPECTED["triton"] if r.startswith("v1-")]
V1_RELEASE = "0.5.12"
NEWEST_RELEASE = "0.5.23"  # the newest release in the shipped measurement (notebook 06, section 3c)


def default_roles(release: str, backend: str) -> list[str]:
    """The roles run or read for ``release`` when none are named."""
    return list(V1_ROLES) if release.startswith(V1_RELEASE) and backend == "triton" else list(STANDARD[backend])


def part_of(prov: dict, key: str) -> dict:
    """The provenance part (``suite.provenance``) that measured the run ``key`` (release/backend/role);
    the whole provenance for a file written in one go."""
    return next((p for p in prov.get("parts", []) if key in p["runs"]), prov)


def load_runs(
    release: str, backend: str, roles: list[str] | None = None, live: bool = False, cache_dir: str | None = None
) -> dict:
    """{"runs": role -> record, "source": label, "shipped": provenance or None, "backend"}: measured now
    (``live``), else the shipped file."""
    roles = list(roles or default_roles(release, backend))
    if live:
        from workbench.upstream.context import UpstreamContext  # only for live runs, as below

        from .suite import run_roles  # live runs build environments and start ranks: only when asked

        ctx = UpstreamContext() if cache_dir is None else UpstreamContext(cache_dir=Path(cache_dir))

        return {
            "runs": run_roles(ctx, release, backend, roles),
            "source": "measured now",
            "shipped": None,
            "backend": backend,
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
    parts = {p["command"]: p for p in (part_of(prov, f"{release}/{backend}/{r}") for r in roles)}.values()
    when = "; ".join(f"{p['generated_at']}, commit {p['commit']}" for p in parts)
    label = f"shipped measurement ({when}, {versions}; {'; '.join(p['command'] for p in parts)})"
    return {"runs": runs, "source": label, "shipped": prov, "backend": backend}


def sglang_frames(rec: dict) -> list[str]:
    """The crash's frames in sglang's own files (scheduler, worker, runner, backend), outermost first,
    as ``sglang/<path>:<line> in <function>``: the code line below each. ``rec``: a run record's JSON form."""
    out = []
    crash = from_dict(RuntimeRecord, rec).crash
    lines = ((crash.traceback if crash else None) or "").splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r'\s*File "(?:.*/)?(sglang/[^"]+)", line (\d+), in (\S+)', ln)
        if m and "/sglang/" in ln:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            out.append(f"{m.group(1)}:{m.group(2)} in {m.group(3)}: {code}")
    return out


def problems(runs: dict, backend: str) -> list[str]:
    """Roles that did not end as expected, outputs that differ from HF or DP 1, guard findings, leftovers."""
    out = []
    typed = {role: from_dict(RuntimeRecord, r) for role, r in runs.items()}
    for role, r in typed.items():
        if role not in EXPECTED[backend]:
            out.append(f"{role}: no expectation on {backend} (roles there: {', '.join(EXPECTED[backend])})")
            continue
        want, phase, cls, exc = EXPECTED[backend][role]
        c = r.crash
        got = (c.phase, c.spec_info, c.exception_type) if c else (None, None, None)
        if r.status != want:
            said = (c.message if c else None) or (r.error.message if r.error else "")
            out.append(f"{role}: expected {want}, got {r.status} {said}")
        elif want == "crashed" and got != (phase, cls, exc):
            out.append(f"{role}: crashed as {got}, expected {(phase, cls, exc)}")
        elif want == "ok" and not (r.reference and r.reference.equal):
            out.append(f"{role}: outputs differ from HF transformers' greedy tokens")
        if (r.shim_guard or {}).get("violations"):
            out.append(f"{role}: a shim reached protected code: {r.shim_guard['violations']}")
        if r.processes.get("left_running"):
            out.append(f"{role}: processes left running {r.processes['left_running']}")
    for role, r in typed.items():
        prefix = next((p for p in BY_NAME if role.startswith(p)), "")
        one = f"{prefix}dp1"  # the same worker and algorithm at DP 1
        base = typed[one].outputs if one in typed else None
        if r.status == "ok" and base is not None and r.outputs != base:
            out.append(f"{role}: outputs differ from the DP 1 run ({one})")
    return out


def notebook_runs(data: dict, workbench_runs: dict, found: list[str]) -> dict[str, dict]:
    """The notebook record's runs: every runtime run (role ``runtime/<role>``), the workbench's runs
    (``workbench/<revision>``) and a ``checks`` record (the primary: ok, or mismatch with the problems)."""
    checks = {
        "status": "ok" if not found else "mismatch",
        "crash": None,
        "problems": found,
        "config": {"backend": data["backend"], "kernel": None, "source": data["source"]},
    }
    runs = {f"runtime/{k}": v for k, v in data["runs"].items()}
    runs.update({f"workbench/{k}": v for k, v in workbench_runs.items()})
    runs["checks"] = checks
    return runs
