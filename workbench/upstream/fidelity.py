"""Fidelity check: the workbench's own contracts against what the real SGLang releases do.

Compares (1) which backends read ``spec_info.kv_indptr`` in decode/idle, observed on our backends
with a spy spec_info, against the static survey of the release wheels; (2) which revisions'
draft-extend class has the field against the releases that ship that class; (3) the seq_lens
fallback metadata of a DP-padded idle batch against the real 0.5.14 backend's; (4) the crash our
``pr-24860`` raises against the real 0.5.12 / 0.5.13 replays. Offline it uses the shipped survey and
replays (``workbench/assets/upstream_survey.json``, ``upstream_replays.json``); given fresh survey /
replay results it uses those.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.backends import BackendContext, backend_names, create_backend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.experiments.contracts import minimal_batch, probe, spec_cases
from workbench.mem.pool import KVCache, ReqToTokenPool
from workbench.speculative.spec_info import SpecInput, SpecInputType

ASSETS = Path(__file__).resolve().parent.parent / "assets"
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


def padded_idle_table(rows: dict[str, list[int]]) -> torch.Tensor:
    """req_to_token (4, 16) holding `rows` ({row: slots}, as the replay recorded the table it handed
    the real backend): our fallback reads the same table the release's did. The rows hold distinct
    real slot numbers, so a builder that reads another row or column than the real one differs."""
    table = torch.zeros(4, 16, dtype=torch.int32)
    for row, slots in rows.items():
        table[int(row), : len(slots)] = torch.tensor(slots, dtype=torch.int32)
    return table


def load_snapshot(assets: Path = ASSETS) -> dict:
    """The snapshot of the shipped survey and seed replays (``upstream_survey.json``,
    ``upstream_replays.json``, each written by its command; see ``catalogue.toml``)."""
    survey = json.loads((assets / "upstream_survey.json").read_text())
    replays = json.loads((assets / "upstream_replays.json").read_text())
    return snapshot_from(survey, replays)


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
                "req_to_token_rows": ((x.get("metrics") or {}).get("padded_batch") or {}).get("req_to_token_rows"),
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
    real = snap["replay"].get("0.5.14", {})
    if real.get("req_to_token_rows"):
        kv_indptr, kv_indices = seq_lens_kv_metadata(
            padded_idle_table(real["req_to_token_rows"]),
            torch.zeros(2, dtype=torch.int64),
            torch.ones(2, dtype=torch.int64),
        )
        ours = {"kv_indptr": kv_indptr.tolist(), "kv_indices": kv_indices.tolist()}
    else:  # a replay that did not record its table: nothing to run our fallback on
        ours = {"kv_indptr": "no req_to_token rows recorded", "kv_indices": "no req_to_token rows recorded"}
    for field in ("kv_indptr", "kv_indices"):
        check(f"seq_lens fallback {field}, padded idle bs 2, vs real 0.5.14", ours[field], real.get(field))
    hole = probe(
        "triton", next(c for c in spec_cases("pr-24860") if c.name.endswith("(draft-extend)")), "IDLE (padded)"
    )
    for release in ("0.5.12", "0.5.13"):
        r = snap["replay"].get(release, {})
        check(
            f"pr-24860 triton padded-idle exception vs real {release} replay",
            f"{hole['exception']}: {hole['message']}",
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
