"""A workbench crash bundle's batch on real SGLang: the same crash, or the same fallback metadata.

The bundle's `seq_lens`, `req_pool_indices` and `req_to_token` rows (the real slot numbers,
placed at their row ids in a real `ReqToTokenPool` of the bundle's shape) go to the real
`TritonAttnBackend.init_forward_metadata` with the release's own spec-input class (its idle
input). The reference it is compared with comes from the bundle alone (the workbench's one
reference, `workbench.debug.replay.reference_metadata`):
`kv_indptr = [0, cumsum(seq_lens)]`, `kv_indices = concat(rows[row_of(rpi[i])][:seq_lens[i]])`.
Bundles are read as JSON + safetensors: loading one never runs code.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path

from workbench.debug.bundle import JSON_NAME, TENSORS_NAME
from workbench.debug.load import load_bundle as read_bundle
from workbench.debug.replay import reference_metadata as reference

from .env import ensure_env
from .releases import check_version, default_cache_dir, known_releases
from .triage import run_driver

REAL_MODULE = "sglang.srt.speculative.eagle_info"
SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "upstream_bundle_replay.json"


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


def driver_cfg(bundle: dict) -> dict:
    """The driver config that rebuilds the bundle's batch on real sglang."""
    t, meta = bundle["tensors"], bundle["meta"]
    rows, cols = meta["req_to_token_shape"]
    slots = [s for row in t["req_to_token.rows"] for s in row]
    return {
        "req_to_token_shape": [rows, cols],
        "kv_slots": max(slots, default=0) + 1,
        "cases": [
            {
                "module": REAL_MODULE,
                "class": meta["spec_info"]["class"],
                "mode": meta["forward_mode"],
                "backend": "triton",
            }
        ],
        "bundle": {
            "row_ids": t["req_to_token.row_ids"],
            "rows": t["req_to_token.rows"],
            "seq_lens": t["forward_batch.seq_lens"],
            "req_pool_indices": t["forward_batch.req_pool_indices"],
            **{k: t.get(f"forward_batch.{k}", []) for k in ("input_ids", "positions", "out_cache_loc")},
        },
    }


def compare(bundle: dict, case: dict) -> dict:
    """The verdict of one release's replay of the bundle against the bundle and the reference."""
    exc = bundle["meta"].get("exception") or {}
    if case.get("status") == "crashed":
        same = case.get("exception_type") == exc.get("type") and case.get("message") == exc.get("message")
        return {
            "outcome": "crashed",
            "same_exception_as_bundle": same,
            "exception": f"{case.get('exception_type')}: {case.get('message')}",
            "raised_at": next(
                (
                    f"{f['file'].split('/sglang/', 1)[-1]}:{f['line']}"
                    for f in reversed(case.get("frames") or [])
                    if "/sglang/" in f["file"]
                ),
                None,
            ),
        }
    if case.get("status") == "ok":
        ref = reference_metadata(bundle)
        got = {k: case["metrics"].get(k) for k in ("kv_indptr", "kv_indices")}
        return {"outcome": "ok", "metadata": got, "reference": ref, "equal_to_reference": got == ref}
    return {
        "outcome": "error",
        "exception": f"{case.get('exception_type')}: {case.get('message')}",
        "stage": case.get("stage"),
    }


def replay_bundle(
    path: Path, versions: list[str], cache_dir: Path | None = None, log=print, timeout_s: float = 900
) -> dict:
    """Replay the bundle at `path` on each release; JSON-ready."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    bundle = load_bundle(path)
    known = known_releases(cache_dir)
    versions = [check_version(v, known) for v in versions]
    out = {
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "bundle": str(path),
        "bundle_sha256": bundle["sha256"],
        "bundle_meta": {
            k: bundle["meta"].get(k)
            for k in (
                "rank",
                "dp",
                "phase",
                "forward_mode",
                "batch_size",
                "backend",
                "revision",
                "fix_applied",
                "exception",
                "versions",
            )
        },
        "reference": reference_metadata(bundle),
        "releases": {},
    }
    for v in versions:
        env = ensure_env(v, cache_dir, log=log)
        log(f"[sglang-{v}] replaying bundle {path} on the real TritonAttnBackend ...")
        result, stderr, wall, _ = run_driver(
            env.python, {**driver_cfg(bundle), "src_root": str(env.src_root)}, timeout_s
        )
        case = ((result or {}).get("cases") or [{"status": "error", "message": stderr[-300:]}])[0]
        out["releases"][v] = {**compare(bundle, case), "run_s": round(wall, 1), "env": (result or {}).get("env")}
        log(f"[sglang-{v}] {out['releases'][v]}")
    return out


def load_shipped(path: Path | None = None) -> dict:
    """The shipped (dated) bundle replay measurement, with a `label` to show wherever it is shown."""
    data = json.loads(Path(path or SHIPPED).read_text())
    versions = "/".join(data["releases"])
    data["label"] = (
        f"shipped measurement of {data['measured_at'][:10]} on sglang {versions} (bundle "
        f"sha256 {data['bundle_sha256'][:12]}), not a live run"
    )
    return data
