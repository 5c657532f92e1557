# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: SGLang 0.5.14 (workbench CPU runtime)
#     language: python
#     name: sglang-0.5.14
# ---

# %% [markdown]
# # 07 · Debugging the real runtime's crash in SGLang's own code
#
# Notebook 05 steps into the workbench engine's crash. This one does the same for the **released
# SGLang runtime** (notebook 06): `workbench upstream run` runs the release's own scheduler, EAGLE
# worker and `TritonAttnBackend` in two DP rank processes; the idle rank crashes, and before it exits
# it writes a **crash bundle**: the `ForwardBatch`'s fields and tensors, the spec input's class and
# its attributes (present and missing), the backend's class and sizes, the pools, the server
# arguments, the release and the code state (CPU shims, fixes), and the traceback.
#
# This notebook runs **on the release's own kernel**: register it once with
# `workbench upstream kernel --sglang 0.5.14` (for a checkout add `--sglang-src DIR`). That kernel
# runs the release's cached environment with its sources first and the lane's CPU shims applied, so
# `replay_bundle(path)` builds the release's own `TritonAttnBackend` over pools of the recorded
# sizes, rebuilds the batch and the spec input (its missing attribute still missing), and calls the
# failing method: it raises the run's exception at the run's line, and `%debug` (or JupyterLab's
# debugger, with a breakpoint in `triton_backend.py`) stops in SGLang's frame with `spec_info` and
# `forward_batch` there to inspect. With the fix the same call completes, and its metadata is
# compared with what the run itself computed with the fix.
#
# Each run takes about 30-40 s on 2 cores (plus a one-off environment build).

# %%
import ast
import inspect
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from workbench import notebook
from workbench.debug.sglang_bundle import load_rank_bundle
from workbench.debug.sglang_replay import bundle_attributes, replay_bundle, replay_result

try:
    import release_kernel
except ImportError:
    raise RuntimeError(
        "run this notebook on the kernel `workbench upstream kernel --sglang X` registers (sglang-X)"
    ) from None
missing = [k for k in ("WB_WORKBENCH_PYTHON", "WB_WORKBENCH_ROOT") if k not in os.environ]
if missing:
    raise RuntimeError(f"this kernelspec lacks {missing}: register it again with `workbench upstream kernel`")
print("kernel:", release_kernel.CODE_STATE["version"], "sources", release_kernel.CODE_STATE["src_root"])

# %% tags=["parameters"]
release: str = "0.5.14"  # the SGLang release this kernel runs (its environment runs the crash)
sglang_src = None  # type: str|None  a checkout run on the release's environment; the kernel must be registered for it
run_fixes = []  # type: list[str]  fixes the run applies (e.g. verify-input, to reach the draft-extend pass)
replay_fix: str = "verify-input"  # the fix the replay applies after the crash (pr-28221 for draft-extend)
bundle_dir = None  # type: str|None  where the failing rank writes its bundle; None: next to record_path
record_path: str = "runs/notebooks/07_debug_real_runtime.json"  # where the notebook record (JSON) is written
expect: str = "any"  # ok: the replay raises at the run's line and completes with the fixed run's metadata

# %%
if expect not in ("ok", "any"):
    raise ValueError(f"invalid expect {expect!r}; valid: ok, any")

# %% [markdown]
# ## 1 · The run: the idle rank crashes and writes its bundle

# %%
out = Path(record_path).resolve().parent
out.mkdir(parents=True, exist_ok=True)
run_json = out / "07_run.json"
bundles = Path(bundle_dir) if bundle_dir else out / "07_bundles"
cmd = [os.environ["WB_WORKBENCH_PYTHON"], "-m", "workbench", "upstream", "run", "--sglang", release]
cmd += ["--sglang-src", sglang_src] if sglang_src else []
cmd += ["--dp", "2", "--backend", "triton", "--no-reference", "--max-new-tokens", "8"]
cmd += [x for f in run_fixes for x in ("--fix", f)] + ["--json", str(run_json), "--bundle-dir", str(bundles)]
print(" ".join(cmd))
# the run's own temp folder (removed after it) goes in the system's temp dir: this kernel's TMPDIR (its
# kernelspec's tmp/) can be too deep for the ranks' ipc socket paths (about 100 bytes at most)
env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
proc = subprocess.run(cmd, capture_output=True, text=True, cwd=os.environ["WB_WORKBENCH_ROOT"], env=env)
print("\n".join(proc.stdout.strip().splitlines()[-4:]))
rec = json.loads(run_json.read_text())
crash = rec["crash"] or {}
print(rec["status"], "|", crash.get("exception_type"), crash.get("message"))
print("raised at", (crash.get("raised_at") or {}).get("file"), (crash.get("raised_at") or {}).get("line"))
path = crash.get("bundle")
print("bundle:", path)
if not path:
    raise RuntimeError(
        f"the run wrote no crash bundle: status {rec['status']}, {crash.get('bundle_error') or rec.get('error')}\n"
        + proc.stdout[-2000:]
        + proc.stderr[-2000:]
    )

# %% [markdown]
# ## 2 · The bundle
# Loaded with its checks (format, allowed classes, sizes bounded before anything is allocated);
# the spec input's attributes as the run's object held them.

# %%
bundle = load_rank_bundle(path)
print(bundle.summary())
attrs = bundle_attributes(path)
print(attrs["class"], "\n  present:", attrs["present"], "\n  missing:", attrs["missing"])

# %% [markdown]
# ## 3 · The replay, in the release's own code, at the run's line

# %%
replayed = replay_result(path)
print(replayed.status, "| same as the run:", replayed.same_as_run)
print(replayed.exception)
print("rebuilt as None (not in the bundle):", replayed.not_rebuilt)

# %% [markdown]
# To step into it, run `%debug` in a new cell after the next one: the next cell calls
# `replay_bundle(path)`, which raises in the release's code, and keeps the exception as IPython's last
# one (a raising cell would stop papermill). The debugger stops in
# `TritonAttnBackend.init_forward_metadata`, where `p spec_info`, `p forward_batch.forward_mode` and
# `p vars(spec_info).keys()` show the batch and the input without `kv_indptr`. (Do it before the fix
# below: a fix changes the release's class in place until the kernel restarts.)

# %%
try:
    replay_bundle(path)
except AttributeError as exc:
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    traceback.print_exception(exc, limit=-2)

# %% [markdown]
# ## 4 · The fix: the same call completes, with the run's own fixed metadata

# %%
fixed = replay_result(path, [replay_fix])
print(fixed.status, "| metadata equal to the fixed run's:", fixed.metadata_equal, fixed.differences)
print({k: fixed.metadata[k] for k in ("kv_indptr", "kv_indices", "num_kv_splits") if k in fixed.metadata})

# %% [markdown]
# ## 5 · The failing method's reads against the spec input's fields
# Every `spec_info.<name>` the release's method reads, against what the class declares and what the
# run's object held.

# %%
module = __import__(bundle.meta["backend"]["module"], fromlist=["_"])
method = getattr(getattr(module, bundle.meta["backend"]["class"]), bundle.meta["backend"]["method"])
method = getattr(method, "__wrapped__", method)
tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(method)))
reads = sorted(
    {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "spec_info"
    }
)
spec = bundle.meta["spec_info"]
print(f"{'read':<16}{'declared by ' + spec['class']:<36}{'on the run object':<20}raised in the run")
for name in reads:
    declared, held, raised = name in spec["declared"], name in spec["attributes"], name in spec["missing"]
    print(f"{name:<16}{declared!s:<36}{held!s:<20}{raised}")

# %%
checks = {
    "the run crashed and wrote a bundle": rec["status"] == "crashed" and bool(path),
    "the replay raised the run's exception at the run's line": replayed.status == "crashed"
    and bool(replayed.same_as_run)
    and (replayed.exception or {}).get("line") == (crash.get("raised_at") or {}).get("line"),
    "with the fix it completed with the fixed run's metadata": fixed.status == "ok" and fixed.metadata_equal is True,
}
for what, ok in checks.items():
    print("ok  " if ok else "FAIL", what)
notebook.save_record(
    record_path,
    "07_debug_real_runtime",
    {"release": release, "sglang_src": sglang_src, "run_fixes": run_fixes, "replay_fix": replay_fix},
    {"run": rec},
    "run",
    extra={
        "bundle": path,
        "replay": {"status": replayed.status, "same_as_run": replayed.same_as_run, "exception": replayed.exception},
        "fixed": {"status": fixed.status, "metadata_equal": fixed.metadata_equal, "differences": fixed.differences},
        "checks": checks,
    },
)
if expect == "ok" and not all(checks.values()):
    raise notebook.ExpectationError(f"expect='ok' but {[k for k, v in checks.items() if not v]}")
