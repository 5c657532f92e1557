"""Fidelity check: the workbench's own contracts against what the real SGLang releases do.

Compares (1) which backends read ``spec_info.kv_indptr`` in decode/idle, observed on our backends
with a spy spec_info, against the static survey of the release wheels; (2) which revisions'
draft-extend class has the field against the releases that ship that class; (3) the seq_lens
fallback metadata of a DP-padded idle batch against the real 0.5.14 backend's; (4) the crash our
``pr-24860`` raises against the real 0.5.12 / 0.5.13 replays. Offline it uses the snapshot in
``workbench/assets/upstream_snapshot.json``; given fresh survey / replay results it uses those.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.backends import BackendContext, backend_names, create_backend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.experiments.contracts import minimal_batch, probe, spec_cases
from workbench.mem.pool import KVCache, ReqToTokenPool, TokenSlotAllocator
from workbench.speculative.spec_info import SpecInput, SpecInputType

SNAPSHOT = Path(__file__).resolve().parent.parent / "assets" / "upstream_snapshot.json"
UPSTREAM_FILE = {
    "triton": "triton_backend.py",
    "flashinfer": "flashinfer_backend.py",
    "fa3": "flashattention_backend.py",
    "torch_native": "torch_native_backend.py",
}
REVISION_RELEASES = {"pre-24860": ["0.5.11"], "pr-24860": ["0.5.12", "0.5.13"], "pr-28221": ["0.5.14"]}


class SpySpecInput(SpecInput):
    """Answers every attribute it lacks with None and remembers the name."""

    def __init__(self) -> None:
        super().__init__(SpecInputType.EAGLE_DRAFT_EXTEND)
        self.__dict__["reads"] = set()

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self.__dict__["reads"].add(name)
        return None


def observed_reads(backend: str) -> dict[str, bool]:
    """Does ``backend`` read spec_info.kv_indptr in DECODE / padded IDLE? (seen, not declared)"""
    out = {}
    for mode in ("DECODE", "IDLE (padded)"):
        be = create_backend(
            backend, BackendContext(ReqToTokenPool(4, 64), KVCache(1, 64, 1, 16, torch.float32), 2, 1, 16)
        )
        fb = minimal_batch(mode, be)
        fb.spec_info = spy = SpySpecInput()
        be.init_forward_metadata(fb)
        out[mode] = "kv_indptr" in spy.reads
    return out


def padded_idle_table() -> torch.Tensor:
    """req_to_token (4, 8) as the engine leaves it with two requests running: row 0 reserved for
    padded IDLE rows (slot 0, the sink), rows 1-2 holding real slots from the allocator. A builder
    that reads any other row or column than row 0 / column 0 yields a real slot number there."""
    pool, slots = ReqToTokenPool(4, 8), TokenSlotAllocator(32)
    pool.alloc(1)  # row 0: the padding row, reserved as the workers reserve it
    for row, n in zip(pool.alloc(2), (5, 8), strict=False):
        pool.req_to_token[row, :n] = slots.alloc(n).to(torch.int32)
    return pool.req_to_token


def load_snapshot(path: Path | None = None) -> dict:
    return json.loads(Path(path or SNAPSHOT).read_text())


def snapshot_from(survey: dict, replays: list[dict]) -> dict:
    """The snapshot's shape from fresh ``survey()`` and ``replay()`` results."""
    return {
        "survey": {
            v: {
                "spec_inputs": {k: x["has_field"] for k, x in r["spec_inputs"].items()},
                "backends": {k: {"reads": x["reads"], "kinds": x["kinds"]} for k, x in r["backends"].items()},
            }
            for v, r in survey["releases"].items()
        },
        "replay": {
            x["config"]["sglang"]: {
                "status": x["status"],
                "exception": (x["crash"] or {}).get("exception_type"),
                "message": (x["crash"] or {}).get("message"),
                "kv_indptr": (x.get("metrics") or {}).get("kv_indptr"),
                "kv_indices": (x.get("metrics") or {}).get("kv_indices"),
            }
            for x in replays
        },
    }


def fidelity(snapshot: dict | None = None) -> dict:
    """Returns {"checks": [{check, ours, upstream, equal}], "differences": [...]}."""
    snap = snapshot or load_snapshot()
    checks = []

    def check(name: str, ours, upstream) -> None:
        checks.append({"check": name, "ours": ours, "upstream": upstream, "equal": ours == upstream})

    survey = snap["survey"]
    for be in backend_names():
        ours = observed_reads(be)
        for release, facts in sorted(survey.items()):
            up = facts["backends"].get(UPSTREAM_FILE[be])
            if up is None:
                checks.append(
                    {
                        "check": f"{be} reads spec_info.kv_indptr ({release})",
                        "ours": ours["IDLE (padded)"],
                        "upstream": "not surveyed",
                        "equal": None,
                    }
                )
                continue
            check(
                f"{be} reads spec_info.kv_indptr in decode/idle vs {UPSTREAM_FILE[be]} {release}",
                ours["DECODE"] and ours["IDLE (padded)"],
                up["reads"],
            )
    for rev, releases in REVISION_RELEASES.items():
        cls = next(c for c in spec_cases(rev) if c.name.endswith("(draft-extend)"))
        ours = hasattr(cls.make("IDLE (padded)", None), "kv_indptr")
        for release in releases:
            facts = survey.get(release, {}).get("spec_inputs", {})
            upstream = facts.get("EagleDraftExtendInput", facts.get("EagleDraftInput"))
            check(f"{rev} draft-extend spec_info has kv_indptr vs {release}", ours, upstream)
    table = padded_idle_table()
    kv_indptr, kv_indices = seq_lens_kv_metadata(
        table, torch.zeros(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64)
    )
    real = snap["replay"].get("0.5.14", {})
    check("seq_lens fallback kv_indptr, padded idle bs 2, vs real 0.5.14", kv_indptr.tolist(), real.get("kv_indptr"))
    check("seq_lens fallback kv_indices, padded idle bs 2, vs real 0.5.14", kv_indices.tolist(), real.get("kv_indices"))
    hole = probe(
        "triton", next(c for c in spec_cases("pr-24860") if c.name.endswith("(draft-extend)")), "IDLE (padded)"
    )
    for release in ("0.5.12", "0.5.13"):
        r = snap["replay"].get(release, {})
        check(
            f"pr-24860 triton padded-idle outcome vs real {release} replay",
            f"{hole['outcome']}: {hole['message']}",
            f"{r.get('exception')}: {r.get('message')}",
        )
    return {"checks": checks, "differences": [c for c in checks if c["equal"] is False]}


def format_fidelity(result: dict) -> str:
    lines = []
    for c in result["checks"]:
        mark = {True: "same", False: "DIFF", None: "n/a "}[c["equal"]]
        lines.append(f"[{mark}] {c['check']}: ours {c['ours']!r}, upstream {c['upstream']!r}")
    lines.append(f"{len(result['differences'])} difference(s)")
    return "\n".join(lines)
