"""``run_runtime``: the released SGLang runtime on this CPU, one run, one run record.

Validates everything before a process starts, builds (or reuses) the release's replay
environment, runs one rank process per DP rank (``launch.run_ranks``; the requests go to rank 0,
the other ranks are idle), then HF transformers' greedy reference when the run completed, and
returns the record (``record.build``). Never raises for a run that fails: the record says why.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from workbench.debug.bundle import new_bundle_dir
from workbench.run.serialise import to_dict
from workbench.upstream.context import UpstreamContext
from workbench.upstream.release_process import release_env, run_in_release
from workbench.upstream.sources.envs import EnvBuildError, ensure_env, ensure_sources
from workbench.upstream.sources.releases import check_version, known_releases
from workbench.upstream.sources.trees import source_root

from . import release_record as record_mod
from . import shim_guard
from .fixes import FIXES
from .release_launch import free_port, run_ranks, thread_binding

ASSETS = Path(__file__).resolve().parents[2] / "assets"
MODELS = ASSETS / "runtime_models"
PROMPTS = ASSETS / "prompts.json"
RUNS = ASSETS / "runtime_runs.json"  # the shipped runs: their crash tracebacks name protected modules
REFERENCE_TARGET = "runtime.reference"  # the HF reference, started in the release's interpreter
BACKENDS = ("triton", "torch_native")
# The speculative algorithms the real runtime starts, each with its draft model (a folder of MODELS, or None):
# EAGLE3 the EAGLE3 head (LlamaForCausalLMEagle3), EAGLE an EAGLE-1 head (LlamaForCausalLMEagle,
# scripts/train_runtime_eagle_draft.py), STANDALONE an ordinary smaller Qwen3 (the target's first two
# layers, scripts/make_runtime_standalone_draft.py), NGRAM none.
ALGORITHMS = ("EAGLE3", "EAGLE", "STANDALONE", "NGRAM")
DRAFT_MODEL = {"EAGLE3": "draft", "EAGLE": "eagle_draft", "STANDALONE": "standalone_draft", "NGRAM": None}
# The draft model's backend: SGLang's EAGLE needs a multi-step draft-decode backend, which torch_native
# lacks (speculative/draft_utils.py refuses it), so a torch_native target runs a triton draft.
DRAFT_BACKEND = {"triton": "triton", "torch_native": "triton"}
DP_SIZES = (1, 2, 3)
# Which ranks are idle: "start", every rank but 0 gets no request; "mid", every rank gets the prompts
# but the last one generates only MID_IDLE_TOKENS, so it finishes after its first decode pass and runs
# IDLE batches while the others still decode (at dp 3 two ranks stay busy).
IDLE_MODES = ("start", "mid")
MID_IDLE_TOKENS = 2
TREE_KERNELS_RELEASE = "0.5.23"  # whose kernels/ops/speculative/spec_tree.py the tree shims load
TREE_KERNELS_FILE = "sglang/kernels/ops/speculative/spec_tree.py"
LOG_DIR_ENV = "WB_LOG_DIR"


def runtime_settings(tree_src: Path, dp: int | None = None) -> dict[str, str]:
    """SGLang's settings for the CPU (``in_release.shims.SETTINGS`` says why each) and the tree kernels'
    source, for ``dp`` ranks (their thread binding) or, ``dp`` None, the release kernel (no binding)."""
    out = {"SGLANG_USE_CPU_ENGINE": "1", "TORCH_COMPILE_DISABLE": "1", "WB_SPEC_TREE_SRC": str(tree_src)}
    if dp is not None:
        out["SGLANG_CPU_OMP_THREADS_BIND"] = thread_binding(dp)
    return out


class RuntimeConfigError(ValueError):
    """A bad argument, named with the valid values, before anything starts."""


def validate(
    version: str,
    dp: int,
    backend: str,
    fixes: list[str],
    steps: int,
    topk: int,
    draft_tokens: int,
    num_prompts: int,
    max_new_tokens: int,
    sglang_src: Path | None,
    known: list[str] | None,
    extra_shims: list[Path] = (),
    idle: str = "start",
    algorithm: str = "EAGLE3",
) -> None:
    """Raise RuntimeConfigError (or ReleaseError for the version) naming the bad value."""
    if known is not None:
        check_version(version, known)
    if dp not in DP_SIZES:
        raise RuntimeConfigError(f"bad dp {dp!r}; valid: {', '.join(map(str, DP_SIZES))} (dp >= 2: ranks >= 1 idle)")
    if idle not in IDLE_MODES:
        raise RuntimeConfigError(f"bad idle {idle!r}; valid: {', '.join(IDLE_MODES)}")
    if idle == "mid" and dp < 2:
        raise RuntimeConfigError(f"bad idle {idle!r} at dp {dp}; valid at dp 1: start (no rank to go idle)")
    if idle == "mid" and max_new_tokens <= MID_IDLE_TOKENS:
        raise RuntimeConfigError(
            f"bad max_new_tokens {max_new_tokens!r} with idle mid; valid: > {MID_IDLE_TOKENS} (rank 0 must outlast)"
        )
    if backend not in BACKENDS:
        raise RuntimeConfigError(f"bad backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if algorithm not in ALGORITHMS:
        raise RuntimeConfigError(f"bad speculative algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    bad = [f for f in fixes if f not in FIXES]
    if bad or len(set(fixes)) != len(fixes):
        raise RuntimeConfigError(f"bad fix {bad or fixes!r}; valid: {', '.join(FIXES)} (each at most once)")
    if steps < 1 or topk < 1:
        raise RuntimeConfigError(f"bad steps {steps!r} / topk {topk!r}; valid: integers >= 1")
    if topk == 1 and draft_tokens != steps + 1:
        raise RuntimeConfigError(
            f"bad draft_tokens {draft_tokens!r} for topk 1; valid: steps + 1 = {steps + 1} (a chain; SGLang asserts it)"
        )
    if not 2 <= draft_tokens <= topk * steps + 1:
        raise RuntimeConfigError(f"bad draft_tokens {draft_tokens!r}; valid: 2..{topk * steps + 1} (topk * steps + 1)")
    if not 1 <= num_prompts <= 20:
        raise RuntimeConfigError(f"bad num_prompts {num_prompts!r}; valid: 1..20")
    if not 1 <= max_new_tokens <= 256:
        raise RuntimeConfigError(f"bad max_new_tokens {max_new_tokens!r}; valid: 1..256")
    for part in ("target", DRAFT_MODEL[algorithm]):
        for name in ("config.json", "model.safetensors"):
            if part is not None and not (MODELS / part / name).is_file():
                script = {
                    "eagle_draft": "train_runtime_eagle_draft.py",
                    "standalone_draft": "make_runtime_standalone_draft.py",
                }.get(part, "train_runtime_models.py")
                raise RuntimeConfigError(
                    f"model file {MODELS / part / name} is missing; rebuild the lane's models "
                    f"with `python scripts/{script}`"
                )
    if sglang_src is not None:
        source_root(Path(sglang_src))  # SourceError names the folder
    for path in extra_shims:
        if not (Path(path).is_file() and str(path).endswith(".py")):
            raise RuntimeConfigError(f"bad extra shim {str(path)!r}; valid: a .py file with an install() function")


def code_state(version: str, src: Path | None, fixes: list[str], label: str | None = None) -> str:
    """The run's code state as one label: the release (or checkout) and the fixes applied from the workbench."""
    base = label or (f"sglang {version}" if src is None else f"checkout {src} on sglang {version}'s environment")
    return base + "".join(f" + {f}" for f in fixes)


def load_prompts(num_prompts: int) -> list[str]:
    """The workbench's held-out prompts (shared with its own engine), the first ``num_prompts``."""
    return json.loads(PROMPTS.read_text())["prompts"][:num_prompts]


def speculative_args(algorithm: str, steps: int, topk: int, draft_tokens: int) -> dict:
    """The ServerArgs fields that choose ``algorithm`` and its draft (``DRAFT_MODEL``).

    NGRAM has no draft model and takes its tree breadth from ``speculative_ngram_max_bfs_breadth``
    (SGLang's ``_handle_ngram`` sets ``speculative_eagle_topk`` from it and the steps from the tokens)."""
    args = {"speculative_algorithm": algorithm, "speculative_num_draft_tokens": draft_tokens}
    if DRAFT_MODEL[algorithm] is None:
        return {**args, "speculative_ngram_max_bfs_breadth": topk}
    return {
        **args,
        "speculative_draft_model_path": str(MODELS / DRAFT_MODEL[algorithm]),
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
    }


def _rank_configs(cfg: dict, run_dir: Path, prompts: list[list[int]], src_root: Path) -> list[dict]:
    args = {
        "model_path": str(MODELS / "target"),
        **speculative_args(cfg.get("algorithm", "EAGLE3"), cfg["steps"], cfg["topk"], cfg["draft_tokens"]),
        "device": "cpu",
        "attention_backend": cfg["backend"],
        "speculative_draft_attention_backend": DRAFT_BACKEND[cfg["backend"]],
        "skip_tokenizer_init": True,
        "disable_cuda_graph": True,
        "dtype": "float32",
        "max_total_tokens": 4096,
        "max_running_requests": max(4, len(prompts)),
        "tp_size": cfg["dp"],
        "dp_size": cfg["dp"],
        "enable_dp_attention": cfg["dp"] > 1,
        "random_seed": 0,
        "disable_overlap_schedule": cfg["disable_overlap_schedule"],
        "log_level": "warning",
    }
    base = {
        "dp": cfg["dp"],
        "version": cfg["sglang"],
        "src_root": str(src_root),
        "run_dir": str(run_dir),
        "nccl_port": free_port(),
        "max_new_tokens": cfg["max_new_tokens"],
        "vocab_size": 257,
        "fixes": cfg["fixes"],
        "extra_shims": cfg.get("extra_shims", []),
        "traceback_modules": traceback_modules(),
        "bundle_dir": cfg.get("bundle_dir"),
        "server_args": args,
    }
    reqs = [{"rid": f"p{i}", "input_ids": ids} for i, ids in enumerate(prompts)]
    base["busy_result_paths"] = [str(run_dir / "rank0.result.json")]  # the requests go to rank 0
    mid = cfg.get("idle", "start") == "mid"
    return [
        {
            **base,
            "rank": r,
            "result_path": str(run_dir / f"rank{r}.result.json"),
            "requests": reqs if r == 0 or mid else [],
            "max_new_tokens": MID_IDLE_TOKENS if mid and r == cfg["dp"] - 1 else cfg["max_new_tokens"],
        }
        for r in range(cfg["dp"])
    ]


def traceback_modules() -> list[str]:
    """The sglang modules on every crash traceback the real runtime shipped (``RUNS``): protected by the shim guard."""
    return shim_guard.traceback_modules(json.loads(RUNS.read_text())["runs"].values())


def _reference(python: Path, run_dir: Path, prompts: list[list[int]], max_new_tokens: int, timeout_s: float) -> dict:
    """HF transformers' greedy tokens (``reference.py``, in the release's interpreter, in ``run_dir``)."""
    cfg = {"model_path": str(MODELS / "target"), "prompts": prompts, "max_new_tokens": max_new_tokens, "threads": 2}
    run = run_in_release(python, REFERENCE_TARGET, cfg, timeout_s, run_dir=run_dir, name="reference")
    if run.exit_code != 0 or run.result is None:
        return {"error": run.output.strip()[-800:] or f"the reference ended by {run.cause}"}
    return run.result


def _keep_logs(run_dir: Path, dp: int) -> str | None:
    target = os.environ.get(LOG_DIR_ENV)
    if not target:
        return None
    dest = Path(target) / run_dir.name
    dest.mkdir(parents=True, exist_ok=True)
    for r in range(dp):
        if (run_dir / f"rank{r}.log").exists():
            shutil.copyfile(run_dir / f"rank{r}.log", dest / f"rank{r}.log")
    return str(dest)


def run_runtime(
    ctx: UpstreamContext,
    version: str,
    dp: int = 2,
    backend: str = "triton",
    fixes: list[str] | tuple[str, ...] = (),
    sglang_src: Path | str | None = None,
    steps: int = 3,
    topk: int = 1,
    draft_tokens: int = 4,
    num_prompts: int = 1,
    max_new_tokens: int = 16,
    reference: bool = True,
    disable_overlap_schedule: bool = False,
    timeout_s: float = 300,
    extra_shims: list[Path] | tuple[Path, ...] = (),
    bundle_dir: Path | str | None = None,
    idle: str = "start",
    algorithm: str = "EAGLE3",
) -> dict:
    """Run the real SGLang ``version`` (or the checkout ``sglang_src`` on that release's environment).

    ``ctx`` gives the cache (the release's environment, shared with the replays) and the progress
    log; ``timeout_s`` bounds the rank processes (and the HF reference), apart from ``ctx.timeout_s`` (one
    replay process's limit); ``extra_shims``: files whose ``install()`` each rank calls after the real runtime's
    shims and fixes, for testing the shim guard only. Returns the run record (``record.RuntimeRecord``) in
    its JSON form (``workbench.run.serialise.to_dict``): status ``ok`` / ``crashed`` / ``timeout`` /
    ``error``. Raises RuntimeConfigError, ReleaseError or SourceError for bad arguments, before anything
    starts. A rank that crashes in a forward writes its crash bundle (``rank_bundle.py``) under
    ``bundle_dir`` (default ``workbench.debug.bundle.new_bundle_dir()``, never the temp dir); the record's
    ``crash.bundle`` names it. ``idle`` (``IDLE_MODES``): ranks >= 1 idle from the start, or every rank
    given the prompts and the last one only ``MID_IDLE_TOKENS`` new tokens, so it goes idle mid-run.
    ``algorithm`` (``ALGORITHMS``): the speculative algorithm, with its draft model (``DRAFT_MODEL``).
    """
    t0 = time.perf_counter()
    log = ctx.log
    fixes = list(fixes)
    src = Path(sglang_src) if sglang_src is not None else None
    validate(
        version,
        dp,
        backend,
        fixes,
        steps,
        topk,
        draft_tokens,
        num_prompts,
        max_new_tokens,
        src,
        known_releases(ctx),
        [Path(p) for p in extra_shims],
        idle,
        algorithm,
    )
    texts = load_prompts(num_prompts)
    prompts = [list(t.encode("utf-8")) for t in texts]
    cfg = {
        "sglang": version,
        "sglang_src": str(src) if src else None,
        "dp": dp,
        "backend": backend,
        "fixes": fixes,
        "steps": steps,
        "topk": topk,
        "draft_tokens": draft_tokens,
        "max_new_tokens": max_new_tokens,
        "draft_backend": DRAFT_BACKEND[backend],
        # the workbench's run-record fields the nightly report groups by (code state, mode, models)
        "revision": code_state(version, src, fixes),
        "apply_fix_in_place": False,
        "mode": "real-runtime",  # EAGLE3 in SGLang itself: kept apart from the workbench engine's eagle / greedy
        "model_dir": str(MODELS),
        "seed": 0,
        "prompts": texts,
        "disable_overlap_schedule": disable_overlap_schedule,
        "timeout_s": timeout_s,
        "extra_shims": [str(Path(p).resolve()) for p in extra_shims],
        "bundle_dir": str(Path(bundle_dir).resolve() if bundle_dir is not None else new_bundle_dir()),
        "idle": idle,
        "algorithm": algorithm,
        "draft_model": DRAFT_MODEL[algorithm],
    }
    rec = record_mod.new(cfg)
    if idle == "mid":
        rec.config.idle_ranks = [dp - 1]  # from its first decode pass on
    mid = " idle-mid" if idle == "mid" else ""
    alg = "" if algorithm == "EAGLE3" else f" {algorithm}"
    fixed = " +" + "+".join(fixes) if fixes else ""
    tag = f"[sglang-{version}{' checkout' if src else ''}{alg} dp{dp}{mid} {backend}{fixed}]"
    try:
        env = ensure_env(ctx, version, src_root=None if src is None else source_root(src))
        tree_src = ensure_sources(ctx, TREE_KERNELS_RELEASE) / TREE_KERNELS_FILE
    except EnvBuildError as exc:
        return to_dict(record_mod.fail(rec, f"install:{exc.step}", exc.detail, exc.missing, t0))
    rec.timings.update(env_s=round(time.perf_counter() - t0, 2), env_cached=env.cached, venv_build_s=env.built_in_s)
    rec.env.update(venv=str(env.root), packages=env.packages, notes=env.notes)
    run_dir = Path(tempfile.mkdtemp(prefix="wb-rt-"))
    try:
        configs = _rank_configs(cfg, run_dir, prompts, env.src_root)
        proc_env = release_env(run_dir, runtime_settings(tree_src, dp))  # torchinductor_<user> goes with run_dir
        rec.env["settings"] = {
            k: proc_env[k] for k in ("SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET", "SGLANG_CPU_OMP_THREADS_BIND")
        }
        log(
            f"{tag} starting {dp} rank process(es): the real Scheduler + {algorithm} worker on CPU "
            f"(timeout {timeout_s:.0f} s)"
        )
        ranks = run_ranks(env.python, configs, run_dir, proc_env, timeout_s)
        record_mod.fill(rec, ranks, prompts)
        log(f"{tag} {record_mod.one_line(rec)} ({ranks.wall_s:.1f} s)")
        if reference and rec.status == "ok":
            ref = _reference(env.python, run_dir, prompts, max_new_tokens, timeout_s)
            record_mod.check_reference(rec, ref)
            log(f"{tag} HF transformers reference: {'equal' if rec.reference and rec.reference.equal else 'DIFFERENT'}")
        rec.logs = _keep_logs(run_dir, dp)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    rec.timings["wall_s"] = round(time.perf_counter() - t0, 2)
    return to_dict(rec)
