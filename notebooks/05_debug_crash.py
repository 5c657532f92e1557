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
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Debug the crash where it happens
#
# Notebook 01 shows the idle rank's `AttributeError` as a traceback printed by a rank process.
# Here the failing rank's batch comes back into this kernel: when a forward raises, the rank writes
# a **crash bundle** (`crash-bundle-rank<R>/`: `bundle.json` + `tensors.safetensors`, no pickle)
# holding the `ForwardBatch` tensors, the `req_to_token` rows the batch reads, the `spec_info`
# class and its field values, the backend and attention dims. `workbench.replay_crash(bundle)`
# rebuilds the pools, the backend and the batch in this process and calls `init_forward_metadata`
# as the model runner does, so the same exception is raised from the same line, and `%debug`
# stops there with `spec_info` and `forward_batch` live.

# %%
import traceback

import workbench
from workbench import notebook
from workbench.views import crash_bundle as view

# %% tags=["parameters"]
backend: str = "triton"  # attention backend: triton, flashinfer, fa3 or torch_native
revision: str = "pr-24860"  # code state: pre-24860, pr-24860 (the regression) or pr-28221 (the fix)
dp: int = 2  # DP attention ranks, one process each (at least 1; the crash needs 2)
dp_policy: str = "pack"  # prompts to DP ranks: balanced, or pack (fill rank 0 first: later ranks idle)
steps: int = 3  # EAGLE draft steps per round (at least 1)
topk: int = 2  # branches kept per draft step (at least 1)
draft_tokens: int = 4  # tree tokens verified per request (2 .. steps * topk + 1)
num_prompts: int = 1  # how many shipped prompts (at least 1; unused when prompts is given)
prompts = None  # type: list[str]|None  prompt strings; None: num_prompts of the shipped set
max_new_tokens: int = 8  # tokens generated per prompt (at least 1)
model_dir = None  # type: str|None  folder with target/ and draft/; None: the shipped models
timeout_s: float = 300.0  # whole-run limit in seconds; past it the run ends as timeout
record_path: str = "runs/notebooks/05_debug_crash.json"  # where the notebook record (JSON) is written
expect: str = "any"  # crashed: the run must crash (the replay's verdict is role replay); ok; any: no check

# %%
params = dict(
    backend=backend,
    revision=revision,
    dp=dp,
    dp_policy=dp_policy,
    steps=steps,
    topk=topk,
    draft_tokens=draft_tokens,
    num_prompts=num_prompts,
    prompts=prompts,
    max_new_tokens=max_new_tokens,
    model_dir=model_dir,
    timeout_s=timeout_s,
    expect=expect,
)
config = notebook.run_config(params)

# %% [markdown]
# ## 1 · The crash, and its bundle
# The run record's `crash.bundle` is the directory the failing rank wrote beside its log.

# %%
result = workbench.reproduce(config)
print(result.summary())
bundle_path = result.crash.bundle if result.crash else None
print("crash bundle:", bundle_path or "none (no forward raised)")

# %% [markdown]
# ## 2 · What the bundle holds
# Loading validates it (format version, tensor shapes against `bundle.json`, the `spec_info` class
# against an allow-list of spec-input classes); nothing in it runs code.

# %%
bundle = workbench.load_bundle(bundle_path) if bundle_path else None
print(bundle.summary() if bundle else "nothing to load")
view.bundle_tensors(bundle) if bundle else None

# %% [markdown]
# ## 3 · Replay it in this process
# `replay_crash` raises what the rank raised; here it is caught to show it. The table puts the
# replayed exception beside the rank's: same type, message and innermost `file:line`.

# %%
replayed = None
if bundle is not None:
    try:
        workbench.replay_crash(bundle)
    except Exception as exc:
        replayed = exc
        print("replayed in-process:", "".join(traceback.format_exception_only(exc)).strip())
    else:
        print("the replay did not raise: the fix is applied, or the recorded failure is outside init_forward_metadata")
view.frame_check(replayed, bundle, result.crash.traceback) if replayed else None

# %% [markdown]
# ## 4 · The failing frame
# The backend's `init_forward_metadata`, the failing line marked (`>>`).

# %%
view.frame_source(replayed) if replayed else None

# %% [markdown]
# What the backend reads off `spec_info` (found in its source), beside what the bundle's
# `spec_info` class declares and holds: the backend reads `kv_indptr`, the class has no such field.

# %%
view.spec_reads(bundle, replayed) if replayed else None

# %% [markdown]
# The frame's locals, as the debugger sees them there (`forward_batch`/`fb`, `spec_info`, `table`, ...):

# %%
view.frame_locals(replayed) if replayed else None

# %% [markdown]
# **Stop in that frame yourself.** In a new cell run `workbench.replay_crash(bundle_path)` without
# `try`, then `%debug` in the next cell: the debugger opens in `init_forward_metadata` at the
# `spec_info.kv_indptr` read; `p spec_info`, `p forward_batch.seq_lens`, `up` to the replay.
#
# **With JupyterLab's visual debugger** (`make lab`): click the bug icon in the notebook toolbar; in
# the debugger sidebar's *Kernel Sources* panel, filter for the frame's module above
# (`workbench.backends.triton` for the triton backend) and open it; click left of the line number
# marked `>>` above to set a breakpoint; run `workbench.replay_crash(bundle_path)` in a new cell. The
# kernel stops on that line before the read: *Variables* shows `spec_info` (the class without
# `kv_indptr`), `forward_batch` and `table`; continue and the read raises. `make lab` serves the
# repository root, so the backend's file also opens from the file browser (`workbench/backends/`).
# The same from a shell: `workbench debug BUNDLE --pdb` (add `--fix pr-28221` for step 5).

# %% [markdown]
# ## 5 · The fix on the same bundle
# `apply_fix()` adds PR #28221's `kv_indptr: Optional[torch.Tensor] = None` to the class in place.
# The same bundle then takes the seq_lens fallback. Its metadata is checked against an independent
# reference computed in plain Python from the bundle's `req_to_token` rows:
# `kv_indptr = [0, cumsum(seq_lens)]`, `kv_indices = concat(rows[req_pool_indices[i]][:seq_lens[i]])`.

# %%
fixed = None
if bundle is not None:
    workbench.apply_fix()
    try:
        fixed = workbench.replay_crash(bundle)
    finally:
        workbench.undo_fix()
    print(fixed.summary())
view.metadata_table(fixed, bundle) if fixed else None

# %% [markdown]
# ## 6 · The same batch on the real release

# %%
view.upstream_comparison(bundle_path) if bundle_path else None

# %% [markdown]
# ## Record and expectation
# The notebook record holds the run (role `run`) and the replay's verdict (role `replay`: ok when the
# replay raised at the recorded frame and the fixed metadata equals the reference).

# %%
replay_record = view.replay_record(bundle, replayed, fixed)
print(replay_record["status"], *replay_record["problems"], sep="\n  ")
print(
    "record written to",
    notebook.save_record(
        record_path, "05_debug_crash", params, {"run": result, "replay": replay_record}, primary="run"
    ),
)

# %%
print(notebook.require(expect, result))
