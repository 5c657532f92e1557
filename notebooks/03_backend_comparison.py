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
# # 03 · Backends compared: latency per phase, acceptance, speedup over greedy
#
# Each backend runs the same prompts twice: plain greedy decoding with the target alone, and the
# EAGLE3 loop (draft `steps` × `topk` tree, verify `draft_tokens` tokens, draft-extend).
#
# **Read the numbers with their kernels.** On this CPU machine the triton backend runs our
# Triton kernels in Triton's *interpreter* (numpy, slow), and flashinfer and fa3 compute with torch
# stand-ins of their kernels; only their metadata contracts are the real ones. Every label says
# which. Latency here compares code paths on this machine, not GPU performance.
#
# **What should hold.** Greedy tree verification is lossless: EAGLE3 outputs equal the greedy
# outputs on every backend (same `outputs sha256`). Acceptance depends on the models, not on the
# backend, so accept lengths should agree across backends up to float rounding.

# %%
from workbench import notebook, plots

# %% tags=["parameters"]
backends = ["triton", "flashinfer", "fa3", "torch_native"]
revision = "pr-28221"
dp = 1
dp_policy = "balanced"
steps = 3
topk = 2
draft_tokens = 4
num_prompts = 4
prompts = None
max_new_tokens = 32
model_dir = None
timeout_s = 300.0
record_path = "runs/notebooks/03_backend_comparison.json"
expect = "any"

# %%
params = dict(backends=backends, revision=revision, dp=dp, dp_policy=dp_policy, steps=steps, topk=topk,
              draft_tokens=draft_tokens, num_prompts=num_prompts, prompts=prompts, max_new_tokens=max_new_tokens,
              model_dir=model_dir, timeout_s=timeout_s, expect=expect)
config = notebook.run_config(params)

# %% [markdown]
# ## Runs: greedy and EAGLE3 per backend

# %%
runs = notebook.compare_backends(config, backends)
records = [r.record for r in runs.values()]
notebook.summary_table(runs)

# %% [markdown]
# ## Latency per phase
# One sample per forward pass. EAGLE3 spends its time in `draft` (`steps` small passes),
# `verify` (one target pass over the tree) and `draft-extend`; greedy only in `prefill` and `decode`.

# %%
notebook.show(plots.phase_latency(records, mode="eagle"))

# %%
notebook.show(plots.phase_latency(records, mode="greedy"))

# %% [markdown]
# ## Acceptance
# Accept length counts the accepted draft tokens plus the bonus token of each verify step; the
# acceptance rate per position is the share of verify steps whose accepted path reaches that depth.

# %%
notebook.show(plots.accept_length_hist(records))

# %%
notebook.show(plots.acceptance_per_position(records))

# %% [markdown]
# ## Speedup of EAGLE3 over greedy

# %%
notebook.show(plots.speedup(records))

# %% [markdown]
# ## Record and expectation
# `expect="ok"` requires every run to finish; `"any"` only shows the data.

# %%
print("record written to", notebook.save_bundle(record_path, "03_backend_comparison", params, runs,
                                                primary=f"eagle/{backends[0]}"))

# %%
print(notebook.require(expect, *runs.values()))
