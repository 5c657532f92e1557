"""A workbench crash bundle's batch on real SGLang: the same crash, or the same fallback metadata.

The bundle's ``seq_lens``, ``req_pool_indices`` and ``req_to_token`` rows (the real slot numbers,
placed at their row ids in a real ``ReqToTokenPool`` of the bundle's shape) go to the real
``TritonAttnBackend.init_forward_metadata`` with the release's own spec-input class (its idle
input). The reference it is compared with comes from the bundle alone (the workbench's one
reference, ``workbench.debug.replay.reference_metadata``): ``kv_indptr = [0, cumsum(seq_lens)]``,
``kv_indices = concat(rows[row_of(rpi[i])][:seq_lens[i]])``. Bundles are read as JSON +
safetensors: loading one never runs code.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path

from workbench.debug.bundle import JSON_NAME, TENSORS_NAME
from workbench.debug.load import load_bundle as read_bundle
from workbench.debug.replay import reference_metadata as reference

from ..context import UpstreamContext
from ..sources.releases import check_versions
from .cases import SEED_CASE
from .front import replay
from .run_end import CaseRun, case_runs

SHIPPED = Path(__file__).resolve().parent.parent.parent / "assets" / "upstream_bundle_replay.json"
META_KEYS = ("rank", "dp", "phase", "forward_mode", "batch_size", "backend", "revision", "fix_applied", "exception")


def load_bundle(path: Path) -> dict:
    """bundle.json + tensors (as lists) of a `crash-bundle-rank<R>/` folder, validated by the
    workbench's one bundle reader (`workbench.debug.load`); raises `BundleError` naming the file."""
    path = Path(path)
    bundle = read_bundle(path)
    digest = hashlib.sha256((path / JSON_NAME).read_bytes() + (path / TENSORS_NAME).read_bytes()).hexdigest()
    return {
        "meta": bundle.meta,
        "tensors": {k: v.tolist() for k, v in bundle.tensors.items()},
        "sha256": digest,
        "path": str(path),
        "bundle": bundle,
    }


def reference_metadata(bundle: dict) -> dict:
    """The seq_lens fallback's (kv_indptr, kv_indices), computed from the bundle alone."""
    return reference(bundle["bundle"])


def bundle_case(bundle: dict) -> tuple[dict, dict]:
    """(the case, the batch) that rebuild the bundle's batch on real sglang."""
    t, meta = bundle["tensors"], bundle["meta"]
    rows, cols = meta["req_to_token_shape"]
    slots = [s for row in t["req_to_token.rows"] for s in row]
    case = {
        **SEED_CASE,
        "key": "bundle",
        "mode": meta["forward_mode"],
        "batch": "bundle",
        "spec_class": meta["spec_info"]["class"],
        "answer_missing": False,
    }
    batch = {
        "req_to_token_shape": [rows, cols],
        "kv_slots": max(slots, default=0) + 1,
        "row_ids": t["req_to_token.row_ids"],
        "rows": t["req_to_token.rows"],
        "seq_lens": t["forward_batch.seq_lens"],
        "req_pool_indices": t["forward_batch.req_pool_indices"],
        **{k: t.get(f"forward_batch.{k}", []) for k in ("input_ids", "positions", "out_cache_loc")},
    }
    return case, batch


def compare(bundle: dict, case: dict) -> dict:
    """One release's replay of the bundle: how it ended (``status`` ok / crashed / error) and what it is
    against the bundle (``same_exception_as_bundle``) or the reference (``equal_to_reference``)."""
    exc = bundle["meta"].get("exception") or {}
    run = next(iter(case_runs(case)), CaseRun("error"))  # no run: `error`, as `run_end.ended` says
    if run.crashed:
        same = run.exception == exc.get("type") and run.message == exc.get("message")
        return {
            "status": "crashed",
            "same_exception_as_bundle": same,
            "exception": f"{run.exception}: {run.message}",
            "raised_at": run.raised_at,
        }
    if run.returned:
        ref = reference_metadata(bundle)
        got = {k: run.metrics.get(k) for k in ("kv_indptr", "kv_indices")}
        return {"status": "ok", "metadata": got, "reference": ref, "equal_to_reference": got == ref}
    return {
        "status": "error",
        "exception": case.get("error") or f"{run.exception}: {run.message}",
        "stage": case.get("stage"),
    }


def replay_bundle(ctx: UpstreamContext, path: Path, versions: list[str]) -> dict:
    """Replay the bundle at `path` on each release; JSON-ready."""
    bundle = load_bundle(path)
    versions = check_versions(ctx, versions)
    case, batch = bundle_case(bundle)
    out = {
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "bundle": str(path),
        "bundle_sha256": bundle["sha256"],
        "bundle_meta": {k: bundle["meta"].get(k) for k in (*META_KEYS, "versions")},
        "reference": reference_metadata(bundle),
        "releases": {},
    }
    extra = {k: batch[k] for k in ("req_to_token_shape", "kv_slots")}
    for v in versions:
        ctx.log(f"[sglang-{v}] replaying bundle {path} on the real TritonAttnBackend ...")
        result = replay(ctx, v, [case], bundle=batch, extra=extra)
        got = result["cases"][0] if result["cases"] else {"error": result.get("message"), "stage": result.get("stage")}
        out["releases"][v] = {**compare(bundle, got), "run_s": result["run_s"], "env": result.get("env")}
        ctx.log(f"[sglang-{v}] {out['releases'][v]}")
    return out


def load_shipped(path: Path | None = None) -> dict:
    """The shipped (dated) bundle replay measurement, with a `label` to show wherever it is shown; a
    release written before ``status`` says ``outcome`` (the same words), read as its ``status``."""
    data = json.loads(Path(path or SHIPPED).read_text())
    for v, r in data["releases"].items():
        if "outcome" in r and "status" not in r:
            data["releases"][v] = {("status" if k == "outcome" else k): x for k, x in r.items()}
    versions = "/".join(data["releases"])
    data["label"] = (
        f"shipped measurement of {data['measured_at'][:10]} on sglang {versions} (bundle "
        f"sha256 {data['bundle_sha256'][:12]}), not a live run"
    )
    return data
