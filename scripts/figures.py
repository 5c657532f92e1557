"""Writes ``docs/figures.md``: the figures the README and docs/ cite, each from a shipped measurement
under ``workbench/assets`` with the command that made it and the commit it ran at (from
``workbench/assets/catalogue.json``). Nothing in that file is typed by hand.

    python scripts/figures.py            # write docs/figures.md
    python scripts/figures.py --check    # exit 1 when docs/figures.md differs from what it would write

``make assets`` runs it after regenerating the assets; ``tests/test_figures.py`` checks the committed file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "workbench" / "assets"
OUT = ROOT / "docs" / "figures.md"


def _load(name: str) -> object:
    return json.loads((ASSETS / name).read_text())


def _catalogue() -> dict[str, dict]:
    return {e["path"]: e for e in json.loads((ASSETS / "catalogue.json").read_text())["assets"]}


def _source(entry: dict) -> str:
    commands = "; ".join(f"`{c}`" for c in entry["commands"]) or "none writes it"
    made = f" Made by: {entry['made_by']}." if entry.get("made_by") else ""
    edited = f" Edited by hand after its run: {entry['hand_edited']}." if entry.get("hand_edited") else ""
    net = "needs the network" if entry["network"] else "offline"
    return (
        f"From `workbench/assets/{entry['path']}` (commit {', '.join(entry['commit'])}; {net}). "
        f"Command: {commands}.{made}{edited}"
    )


def _table(head: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _f(x: object, nd: int = 3) -> str:
    return f"{x:.{nd}f}" if isinstance(x, float) else "–" if x is None else str(x)


def models() -> list[str]:
    m, r = _load("models/TRAINING.json"), _load("runtime_models/TRAINING.json")
    top1 = ", ".join(_f(x) for x in m["heldout_top1_per_draft_step"])
    return _table(
        ["models", "held-out bits/byte (target)", "head", "wall"],
        [
            [
                f"engine: {m['target_layers']}-layer target + EAGLE3 head (`models/`)",
                _f(m["target_heldout_bits_per_byte"], 4),
                f"held-out top-1 per draft step {top1}",
                f"{m['wall_s_target_and_corpus_head']} s + {m['wall_s_self_distill_run']} s (two runs, {m['box']})",
            ],
            [
                f"real runtime: {r['target'].get('layers', '?')}-layer Qwen3 target + EAGLE3 head (`runtime_models/`)",
                _f(r["target_heldout_bits_per_byte"], 4),
                "last-batch top-1 per step " + ", ".join(_f(x) for x in r["head_last_batch_top1_per_step"]),
                f"{r['wall_s']} s ({r['note']})",
            ],
        ],
    )


def sweep() -> list[str]:
    d = _load("acceptance_sweep.json")
    rows = [
        [
            r["dtype"],
            tuple(r["setting"]),
            r["label"],
            r["status"],
            _f(r.get("accept_length_mean")),
            _f(r.get("acceptance_rate")),
            "{identical_prompts}/{prompts}".format(**r["agreement_with_fp32_greedy"]),
        ]
        for r in d["rows"]
    ]
    head = ["dtype", "(steps, topk, draft tokens)", "backend", "status", "accept length", "acceptance", "= fp32 greedy"]
    return [
        f"{d['prompts']} prompts × {d['max_new_tokens']} tokens, measured {d['measured']}; {d['machine']}.",
        "",
        *_table(head, rows),
        "",
        *[f"- {x}" for x in d["findings"]],
    ]


def replays() -> list[str]:
    rows = []
    for r in _load("upstream_replays.json"):
        crash, m = r.get("crash") or {}, r.get("metrics") or {}
        at = crash.get("raised_at") or {}
        where = f"{Path(at.get('file', '')).name}:{at.get('line')}" if at else "–"
        rows.append(
            [
                r["config"]["sglang"],
                r["status"],
                crash.get("exception_type") or "–",
                where,
                m.get("kv_indptr"),
                m.get("kv_indices"),
            ]
        )
    return _table(["sglang", "status", "exception", "raised at", "kv_indptr", "kv_indices"], rows)


def survey() -> list[str]:
    d = _load("upstream_survey.json")
    rows = []
    for v in d["versions"]:
        r = d["releases"][v]
        has = r["spec_inputs"].get("EagleDraftExtendInput", {}).get("has_field")
        reads = sorted(f for f, b in r["backends"].items() if b.get("reads"))
        rows.append([v, {True: "yes", False: "**no**", None: "no class"}[has], ", ".join(reads) or "–"])
    return _table(["sglang", "`EagleDraftExtendInput.kv_indptr`", "backends reading `spec_info.kv_indptr`"], rows)


def recall() -> list[str]:
    d = _load("upstream_recall.json")
    kinds = ["field removed", "guard removed", "install moved"]
    rows = []
    for v, r in d["releases"].items():
        cells = []
        for k in kinds:
            x = r["kinds"].get(k, {})
            clean = (
                ""
                if x.get("controls_clean") == x.get("controls")
                else f", controls clean {x.get('controls_clean')}/{x.get('controls')}"
            )
            cells.append(f"{_f(x.get('recall'))} / {x.get('mutants', 0)}{clean}")
        rows.append([v, "no" if v in d.get("developed_on", []) else "yes", *cells])
    return [
        f"Recall / mutants per kind; run {d.get('run_s')} s. Developed on {', '.join(d.get('developed_on', []))}.",
        "",
        *_table(["release", "held out", *kinds], rows),
    ]


def oracle_recall() -> list[str]:
    rows = []
    for run in _load("upstream_oracle_recall.json")["runs"]:
        for v, r in run["releases"].items():
            for kind, x in r.get("kinds", {}).items():
                rows.append(
                    [
                        v,
                        "real backends" if "--real-backends" in run["command"] else "all",
                        kind,
                        x.get("run"),
                        x.get("confirmed"),
                        x.get("refuted"),
                        x.get("undecided"),
                        _f(x.get("recall")),
                        _f(x.get("precision")),
                    ]
                )
    head = ["release", "sample", "kind", "run", "confirmed", "refuted", "undecided", "recall", "precision"]
    return _table(head, rows)


def findings() -> list[str]:
    d = _load("upstream_findings.json")
    by: dict[str, Counter] = {}
    for f in d["findings"]:
        by.setdefault(f["release"], Counter())[f["verdict"]] += 1
    verdicts = sorted({v for c in by.values() for v in c})
    rows = [[v, sum(c.values()), *[c.get(x, 0) for x in verdicts]] for v, c in by.items()]
    return [
        f"{len(d['findings'])} findings over {len(by)} releases, {d['measured_on']}.",
        "",
        *_table(["release", "findings", *verdicts], rows),
    ]


def reproducers() -> list[str]:
    index = _load("upstream_repro/index.json")
    rows = []
    for key, r in index["reproducers"].items():
        res = _load(f"upstream_repro/{r['folder']}/result.json")
        rows.append([f"`{key}`", res["verdict"], res["reproduced"], res["fixed"], res["workbench_commit"]])
    return [f"sglang {index['release']}.", "", *_table(["finding", "verdict", "reproduced", "fixed", "commit"], rows)]


def runtime_runs() -> list[str]:
    rows = []
    for key, r in _load("runtime_runs.json")["runs"].items():
        crash = r.get("crash") or {}
        rows.append([key, r["status"], crash.get("exception_type") or "–", f"`{r.get('command')}`"])
    return _table(["run", "status", "exception", "command"], rows)


def explore() -> list[str]:
    d = _load("runtime_explore.json")
    counts = ", ".join(f"{k} {v}" for k, v in d["counts"].items())
    return [f"sglang {d['sglang']}: {len(d['cells'])} cells ({counts}); {d['wall_s']} s."]


def triage() -> list[str]:
    d = _load("upstream_triage.json")
    c = Counter(e["status"] for e in d["entries"].values())
    return [f"{len(d['entries'])} entries: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + "."]


def corpus() -> list[str]:
    d = _load("upstream_bug_corpus.json")
    c = Counter(x["split"] for x in d["cases"])
    return [f"{len(d['cases'])} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + "."]


SECTIONS: list[tuple[str, str, str, Callable[[], list[str]]]] = [
    ("models", "Models", "models", models),
    ("acceptance-sweep", "Acceptance by draft setting and dtype", "acceptance_sweep.json", sweep),
    ("seed-replays", "The seed crash on the real releases", "upstream_replays.json", replays),
    ("survey", "Which releases carry the field, which backends read it", "upstream_survey.json", survey),
    ("recall", "The lint's recall by mutation", "upstream_recall.json", recall),
    ("oracle-recall", "The lint's recall judged by real code", "upstream_oracle_recall.json", oracle_recall),
    ("findings", "The guard's findings per release", "upstream_findings.json", findings),
    ("reproducers", "Reproducers of the findings confirmed live", "upstream_repro", reproducers),
    ("triage", "The reviewed triage", "upstream_triage.json", triage),
    ("bug-corpus", "The bug corpus", "upstream_bug_corpus.json", corpus),
    ("runtime-runs", "The released runtime's runs", "runtime_runs.json", runtime_runs),
    ("runtime-explore", "The released runtime explored", "runtime_explore.json", explore),
]


def render() -> str:
    """docs/figures.md as the shipped assets give it."""
    cat = _catalogue()
    lines = [
        "# Figures",
        "",
        "Written by `python scripts/figures.py` (run by `make assets`) from the shipped measurements under",
        "`workbench/assets`; do not edit by hand. Each section names its asset, the commit the measurement ran at",
        "and the command that regenerates it (`workbench/assets/catalogue.json`, checked by `tests/test_assets.py`).",
        "",
    ]
    for anchor, title, path, section in SECTIONS:
        lines += [f'<a id="{anchor}"></a>', f"## {title}", "", _source(cat[path]), "", *section(), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/figures.md differs from what it would write")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("docs/figures.md is up to date" if same else "docs/figures.md differs: run python scripts/figures.py")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
