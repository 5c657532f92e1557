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
# # 01 · Reproduce the `kv_indptr` crash on an idle DP rank
#
# SGLang PR #24860 turned the draft-extend `spec_info` into an `EagleDraftExtendInput`, a dataclass
# without `kv_indptr`. Under DP attention the triton backend then crashes on the rank that has no
# work. This notebook runs that situation on the workbench engine and shows the crash as data:
# the run record, the traceback from the idle rank, and where each rank was when it happened.
#
# **What runs where.** `workbench.reproduce` runs the EAGLE3 loop (draft → verify → draft-extend)
# with a small Llama-style target and an EAGLE3 head. With `dp > 1` every DP rank is its own
# process (joined by `torch.distributed` over gloo) with its own scheduler, paged KV pool and
# attention backend. `dp_policy="pack"` fills rank 0 first, so with one prompt rank 1 stays idle.
#
# **Why an idle rank reaches `init_forward_metadata`.** Under DP attention every rank joins every
# forward pass, because the MLP gathers tokens across ranks. A rank without requests runs an
# **IDLE** batch, *padded* to batch size 1 so the collective shapes line up, and for a padded
# IDLE batch the model runner calls `attn_backend.init_forward_metadata(forward_batch)`. In the
# draft-extend phase that batch carries `EagleDraftExtendInput.create_idle_input(...)`. The triton
# and flashinfer backends treat decode-or-idle batches as
# `if spec_info is None or spec_info.kv_indptr is None: <build from seq_lens>` — reading an
# attribute the class does not have. With `dp = 1` the idle batch is empty and the call never happens.
#
# **Why the fa3 lane stayed green.** fa3 builds its metadata from the page table and
# `cache_seqlens`; it never reads `spec_info.kv_indptr`. Upstream's CUDA CI runs fa3, so only the
# AMD lane (`--attention-backend triton`) saw the crash. The workbench's flashinfer and fa3 compute
# with torch stand-ins of those libraries' kernels, on any machine (their metadata contracts are the
# real ones); labels say so.

# %%
import workbench
from workbench import notebook
from workbench.views import display, plots, tables

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
max_new_tokens: int = 16  # tokens generated per prompt (at least 1)
model_dir = None  # type: str|None  folder with target/ and draft/; None: the shipped models
timeout_s: float = 300.0  # whole-run limit in seconds; past it the run ends as timeout
verify_idle_input: str = "eagle-verify"  # idle verify input: eagle-verify, or eagle-verify-fixed (None kv_indptr)
idle_verify: str = "graph"  # graph, or eager: the idle rank's verify batch runs init_forward_metadata on its spec_info
compare_backends: list[str] = ["flashinfer", "fa3", "torch_native"]  # also run (EAGLE3): which crash; [] for none
record_path: str = "runs/notebooks/01_reproduce_crash.json"  # where the notebook record (JSON) is written
expect: str = "any"  # crashed, ok or any: the last cell fails unless the run ended so

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
    verify_idle_input=verify_idle_input,
    idle_verify=idle_verify,
    compare_backends=compare_backends,
    expect=expect,
)
config = notebook.run_config(params)

# %% [markdown]
# ## The run
# A crash is part of the result, not an exception: `reproduce` returns the record either way.

# %%
result = workbench.reproduce(config, backend=backend)
print(result.summary())
result

# %% [markdown]
# ## Where it happened
# One row per DP rank: how many prompts it was given, the last forward pass it ran and how it ended.
# On the crashing configuration the idle rank (no prompts) fails in `draft-extend` with forward mode
# `IDLE` and batch size 1: the padded idle batch.

# %%
tables.where_table(result)

# %% [markdown]
# ## Traceback from the failing rank
# The frames end in the backend's `init_forward_metadata`, at the `spec_info.kv_indptr` read.

# %%
print(display.traceback_text(result))

# %% [markdown]
# ## The same settings on the other backends
# Only backends that read `spec_info.kv_indptr` for decode/idle batches fail; fa3 and torch_native do not.

# %%
runs = {"run": result, **notebook.compare_backends(config, compare_backends, modes=["eagle"])}
tables.summary_table(runs)

# %%
plots.show(
    plots.crash_matrix(
        [r.record for r in runs.values()], title=f"Revision {revision}, dp {dp} ({dp_policy}): run status per backend"
    )
)

# %% [markdown]
# ## Record and expectation
# The notebook record (parameters and every run record) goes to `record_path`; the nightly reads it.
# `expect` is `"crashed"`, `"ok"` or `"any"`; only the first two fail the notebook.

# %%
print("record written to", notebook.save_record(record_path, "01_reproduce_crash", params, runs, primary="run"))

# %%
print(notebook.require(expect, result))
