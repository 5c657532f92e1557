"""Reachability: the settings under which the runtime reaches a finding, read from the release's sources.

For a finding whose install reaches an `init_forward_metadata` site (runners.py), from that path:
- `dp_attention`: IDLE batches exist only under DP attention (the scheduler's MLP sync makes
  them); a site behind `batch_size > 0` needs the idle batch padded;
- `cuda_graph`: the conditions on the path that choose the eager runner over a graph replay
  (`can_run_graph`, ...), or `graph` when the site is a graph runner's;
- `workers`: every worker class whose install reaches it, with its file and generation (V2 for
  `*_v2` workers, V1 otherwise);
- `algorithms`: the `SpeculativeAlgorithm` members whose `create_worker` returns those workers
  (its `is_*()` predicates evaluated from the enum's source);
- `backend_flags`: the release's attention-backend options (their names read from the server
  arguments) set to the registry names that build the finding's backend class
  (`attention_registry.py`); the draft option when the site is a draft runner's.
"""

from __future__ import annotations

import ast
import re

from ..sources.trees import SourceTree
from .flow import parse
from .modes import parse_forward_modes

SPEC_INFO = "sglang/srt/speculative/spec_info.py"
REGISTRY = "sglang/srt/layers/attention/attention_registry.py"
SERVER_ARGS = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")
_GRAPH_WORDS = ("graph", "cuda_graph")


class ReleaseFacts:
    """What the release's sources say about workers, algorithms, backends and options."""

    def __init__(self, tree: SourceTree):
        self.workers = self._workers(tree)  # worker class -> [algorithm members]
        self.registry = self._registry(tree)  # backend class -> [registry names]
        fields: set[str] = set()
        for p in tree.files:
            if p == SERVER_ARGS[0] or p.startswith(SERVER_ARGS[1]):
                fields |= set(re.findall(r"^\s+([a-z_]*attention_backend)\s*:", tree.files[p], re.M))
        wanted = {"attention_backend", "decode_attention_backend", "prefill_attention_backend"}
        self.flags = {f: "--" + f.replace("_", "-") for f in sorted(fields) if f in wanted or "draft" in f}

    @staticmethod
    def _workers(tree: SourceTree) -> dict[str, list[str]]:
        text = tree.get(SPEC_INFO)
        if text is None:
            return {}
        algo = parse_forward_modes(text, "SpeculativeAlgorithm")
        module = parse(SPEC_INFO, text)
        func = (
            next((n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == "create_worker"), None)
            if module
            else None
        )
        out: dict[str, list[str]] = {}
        if func is None or algo is None:
            return out

        def preds(test: ast.expr) -> list[str]:
            return [
                n.func.attr
                for n in ast.walk(test)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and getattr(n.func.value, "id", "") == "self"
                and n.func.attr.startswith("is_")
            ]

        def walk(body: list[ast.stmt], tests: list[str]) -> None:
            for stmt in body:
                if isinstance(stmt, ast.If):
                    walk(stmt.body, tests + preds(stmt.test))
                    walk(stmt.orelse, tests)
                elif isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Name):
                    members = set(algo.members)
                    for p in tests:
                        acc = algo.accepts(p)
                        if acc is not None:
                            members &= acc
                    if tests:
                        out.setdefault(stmt.value.id, [])
                        out[stmt.value.id] = sorted(set(out[stmt.value.id]) | members)

        walk(func.body, [])
        return out

    @staticmethod
    def _registry(tree: SourceTree) -> dict[str, list[str]]:
        """{backend class: registry names whose factory returns it} from `@register_attention_backend("x")`;
        a name whose factory returns the class only under a test carries it: `fa4 (when ...)`."""
        text = tree.get(REGISTRY)
        module = parse(REGISTRY, text) if text else None
        out: dict[str, list[str]] = {}
        for node in getattr(module, "body", []):
            if not isinstance(node, ast.FunctionDef):
                continue
            names = [
                d.args[0].value
                for d in node.decorator_list
                if isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant)
            ]

            def walk(body: list[ast.stmt], cond: str | None, names: list[str] = names) -> None:
                for stmt in body:
                    if isinstance(stmt, ast.If):
                        walk(stmt.body, ast.unparse(stmt.test)[:80], names)
                        walk(stmt.orelse, f"not ({ast.unparse(stmt.test)[:80]})", names)
                    elif isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Call):
                        cls = getattr(stmt.value.func, "id", getattr(stmt.value.func, "attr", None))
                        if cls:
                            tags = [n if cond is None else f"{n} (when {cond})" for n in names]
                            out[cls] = sorted(set(out.get(cls, [])) | set(tags))

            walk(node.body, None)
        return out


def _worker_of(path: list[dict], install: dict, facts: ReleaseFacts) -> tuple[str | None, list[str]]:
    """The worker class on the path (or owning the install) that `create_worker` returns, and its algorithms."""
    owners = [s.get("function", "").split(".")[0] for s in path] + [install.get("function", "").split(".")[0]]
    for o in owners:
        if o in facts.workers:
            return o, facts.workers[o]
    stem = install["file"].rsplit("/", 1)[-1][:-3]
    for w, algos in facts.workers.items():
        if stem.replace("_", "") in w.lower():
            return w, algos
    return None, []


def reachability(f: dict, facts: ReleaseFacts, conds_of) -> dict | None:
    """The settings that reach finding `f` along its first reaching runner path; None when none reaches.

    conds_of(step) -> the non-mode conditions around that step's call (runners.Branches).
    """
    reaching = [p for p in f.get("runner_paths", []) if p["fate"] == "reaches"]
    if not reaching:
        return None

    def rank(p: dict) -> tuple:
        graph = any("graph" in (s.get("function", "") + s["file"]).lower() for s in p["path"])
        return graph, "/speculative/" not in p["install"], len(p["path"])

    p = min(reaching, key=rank)
    path, site = p["path"], p["path"][-1]
    conds = [c for step in path for c in conds_of(step)]
    graph = bool(site.get("graph"))
    graph_conds = [c for c in conds if any(w in c for w in _GRAPH_WORDS)]
    workers: dict[str, dict] = {}
    algos: set[str] = set()
    for q in sorted(reaching, key=rank):
        inst = next((i for i in f["installs"] if f"{i['file']}:{i['line']}" == q["install"]), f["installs"][0])
        worker, found = _worker_of(q["path"], inst, facts)
        algos |= set(found)
        gen = "V2" if "_v2" in inst["file"] or (worker or "").endswith("V2") else ("V1" if worker else None)
        workers.setdefault(worker or inst["file"], {"class": worker, "file": inst["file"], "generation": gen})
    stem = f["backend_file"].rsplit("/", 1)[-1][:-3]
    names = facts.registry.get(f["backend_class"], [])
    draft = bool(site.get("draft")) or any("draft" in s.get("function", "").lower() for s in path[:-1])
    options = []
    for field, flag in facts.flags.items():
        if draft and "draft" not in field:
            continue
        if not draft and "draft" in field:
            continue
        if "prefill" in field and f["mode"] in ("DECODE", "IDLE"):
            continue
        if "decode" in field and f["mode"] not in ("DECODE", "IDLE"):
            continue
        options.append(flag)
    return {
        "path": " -> ".join(f"{s.get('function')} ({s['file'].rsplit('/', 1)[-1]}:{s['line']})" for s in path),
        "dp_attention": (
            "required: IDLE batches come only from the DP-attention MLP sync"
            + (
                "; the idle batch must be padded (" + "; ".join(site.get("conditions", [])) + ")"
                if site.get("conditions")
                else ""
            )
            if f["mode"] == "IDLE"
            else "not required"
        ),
        "cuda_graph": (
            f"on: the site is a graph runner's ({site.get('function')})"
            if graph
            else "off for this batch (the eager runner runs it)"
            + (": " + "; ".join(dict.fromkeys(graph_conds)) if graph_conds else "")
        ),
        "workers": list(workers.values()),
        "algorithms": sorted(algos),
        "backend_flags": [f"{flag} {n}" for flag in options for n in names]
        or [f"backend {stem} ({names or 'no registry name'})"],
        "conditions": list(dict.fromkeys(conds)),
    }
