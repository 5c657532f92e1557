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
# # 02 · Apply the fix of PR #28221 in place
#
# **What the fix changes.** PR #28221 adds one field to the draft-extend spec_info:
#
# ```python
# @dataclass
# class EagleDraftExtendInput(SpecInput):
#     ...
#     kv_indptr: Optional[torch.Tensor] = None
# ```
#
# The idle draft-extend input has no tree indices, so the field stays `None`, and a backend that
# checks `spec_info is None or spec_info.kv_indptr is None` takes its **seq_lens fallback**: it
# builds `kv_indptr = cumsum(seq_lens)` and `kv_indices = req_to_token[req, :seq_len]` per row
# (the padded IDLE row has `seq_len` 1 and points at request row 0). That is the path the same
# batch took before PR #24860, when draft-extend carried an `EagleDraftInput` whose `kv_indptr`
# was `None`; so the fixed code must generate exactly the tokens of `pre-24860`.
#
# `with workbench.fix_applied():` adds the field to the regressed class in place for the block (it
# rebuilds the dataclass) and removes it on leaving; a run started inside the block takes the fix
# as its own state and applies it in every DP rank process. This notebook runs the regressed
# revision three times: the `pre-24860` reference, inside the block, and after it.

# %%
from IPython import display as ipython

import workbench
from workbench import notebook
from workbench.speculative.eagle_draft_extend_pr24860 import EagleDraftExtendInput
from workbench.views import display, tables

# %% tags=["parameters"]
backend: str = "triton"  # attention backend: triton, flashinfer, fa3 or torch_native
revision: str = "pr-24860"  # code state: pre-24860, pr-24860 (the regression) or pr-28221 (the fix)
reference_revision: str = "pre-24860"  # revision whose outputs the fixed run must equal: pre-24860
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
record_path: str = "runs/notebooks/02_apply_fix.json"  # where the notebook record (JSON) is written
expect: str = "any"  # ok: the fixed run ends ok with the reference's outputs; crashed: it crashes; any: no check

# %%
params = dict(
    backend=backend,
    revision=revision,
    reference_revision=reference_revision,
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
workbench.undo_fix()  # start from the regressed class even if an earlier session patched it
print("fix applied at start:", workbench.is_fix_applied())

# %% [markdown]
# ## Reference: the code before PR #24860

# %%
reference = workbench.reproduce(config, revision=reference_revision)
print(reference.summary())

# %% [markdown]
# ## The regressed revision with the fix applied in place
# The class's fields outside the block: no `kv_indptr`.

# %%
display.class_fields(EagleDraftExtendInput)

# %% [markdown]
# Inside `with workbench.fix_applied():` the same class object declares
# `kv_indptr: torch.Tensor | None = None`, and the run started there reaches every DP rank with it.

# %%
with workbench.fix_applied():
    print("fix applied:", workbench.is_fix_applied())
    ipython.display(display.class_fields(EagleDraftExtendInput))
    fixed = workbench.reproduce(config, revision=revision)
print(fixed.summary())

# %% [markdown]
# No crash, and the generated tokens are the reference's, token for token: the hashes of the
# outputs agree.

# %%
print(f"outputs token-identical to {reference_revision}:", notebook.same_outputs(fixed, reference))
tables.summary_table({"reference": reference, "fixed": fixed})

# %% [markdown]
# The decoded text, prompt by prompt (a line diff where they differ):

# %%
display.text_diff(reference, fixed, labels=(reference_revision, f"{revision} + apply_fix()"))

# %% [markdown]
# EAGLE3 is lossless: plain greedy decoding with the target alone (dp 1) generates the same text.

# %%
greedy = workbench.reproduce(config, revision=reference_revision, mode="greedy", dp=1)
print(greedy.summary())
display.text_diff(greedy, fixed, labels=("greedy (target only)", "EAGLE3 + apply_fix()"))

# %% [markdown]
# ## After the block: the crash comes back
# Leaving the block removed the field. On a crashing configuration (DP attention with an idle rank,
# a backend that reads `kv_indptr`) the idle rank fails in draft-extend again.

# %%
print("fix applied:", workbench.is_fix_applied())
undone = workbench.reproduce(config, revision=revision)
undone

# %%
runs = {"reference": reference, "fixed": fixed, "undo": undone}
tables.summary_table(runs)

# %% [markdown]
# ## Record and expectation
# `expect="ok"` requires the fixed run to finish and match the reference's outputs;
# `"crashed"` requires it to crash; `"any"` only shows the data.

# %%
print("record written to", notebook.save_record(record_path, "02_apply_fix", params, runs, primary="fixed"))

# %%
print(notebook.require(expect, fixed, same_outputs_as=reference))
