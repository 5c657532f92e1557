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
# # 03 · Backends compared: tokens/s with intervals, metadata cost, attention, acceptance
#
# Every backend runs the same prompts with plain greedy decoding (the target alone) and with the
# EAGLE3 loop in **paired repeats**: each repeat runs every (backend, mode) once, in an order drawn
# at random per repeat. Each figure is the **median over the repeats with its order-statistic
# interval**, whose exact coverage is printed with it (at the default 6 repeats: 96.9 %). Two arms
# are compared by their ratio *within each repeat* (EAGLE3 / greedy, one backend / another), so
# noise both share cancels; the verdict is *faster* or *slower* when that ratio's interval lies
# above or below 1, and otherwise *undecided*, with the number of repeats that would decide it.
#
# Parameters left at `None` take the comparison every face shares
# (`workbench.experiments.definition.COMPARISON`: the spec setting, prompts, new tokens, threads,
# batch size and repeats that `workbench bench`, `workbench compare` and the nightly also run).
#
# **What is timed.** `tokens/s` and the phase latencies cover generation only, from the first
# prefill to the last token. Model load, DP rank start and an untimed warm-up (one request's prefill
# and decode round on every rank, which takes the Triton interpreter's first launches) are `setup_s`,
# shown apart.
#
# **Read the numbers with their kernels.** On CPU the triton backend runs our Triton
# kernels in Triton's *interpreter* (numpy, slow), and flashinfer and fa3 compute with **torch
# stand-ins** of their kernels; only their metadata contracts are the real ones. Every label and
# table says which. Latency compares code paths on this machine, not GPU performance.

# %%
from IPython.display import display

from workbench import notebook
from workbench.experiments.compare import compare
from workbench.experiments.definition import COMPARISON
from workbench.experiments.sweep import SETTINGS, load_shipped, provenance, sweep
from workbench.views import comparison as views
from workbench.views import plots
from workbench.views.display import progress

# %% tags=["parameters"]
backends: list[str] = ["torch_native", "fa3", "flashinfer"]  # compared, greedy and EAGLE3 each (any backend)
revision: str = "pr-28221"  # code state: pre-24860, pr-24860 (the regression) or pr-28221 (the fix)
dp_policy: str = "balanced"  # prompts to DP ranks at compare_dps > 1: balanced or pack
steps = None  # type: int|None  EAGLE draft steps per round (at least 1); None: the comparison's chain
topk = None  # type: int|None  branches kept per draft step (at least 1); None: the comparison's chain
draft_tokens = None  # type: int|None  tree tokens verified per request; None: the comparison's chain
num_prompts = None  # type: int|None  how many shipped prompts (at least 1); None: the comparison's (all)
prompts = None  # type: list[str]|None  prompt strings; None: num_prompts of the shipped set
max_new_tokens = None  # type: int|None  tokens generated per prompt (at least 1); None: the comparison's (64)
threads = None  # type: int|None  torch threads per run (at least 1); None: the kernel's setting (the nightly: 1)
max_running = None  # type: int|None  requests decoded at once (at least 1); None: the comparison's (1)
model_dir = None  # type: str|None  folder with target/ and draft/; None: the shipped models
timeout_s: float = 300.0  # whole-run limit in seconds; past it the run ends as timeout
repeats = None  # type: int|None  paired repeats (at least 2); None: the comparison's (6, coverage 96.9 %)
compare_dps: list[int] = [1]  # DP sizes compared, e.g. [1, 2]
sweep_live: bool = True  # True: run a small acceptance sweep now; False: only the shipped one
sweep_backends: list[str] = ["torch_native", "fa3"]  # backends of the live sweep (the torch paths are fast)
sweep_dtypes: list[str] = ["float32", "bfloat16"]  # float32 and/or bfloat16
sweep_num_prompts: int = 2  # prompts of the live sweep (at least 1)
sweep_max_new_tokens: int = 24  # tokens per prompt in the live sweep (at least 1)
record_path: str = "runs/notebooks/03_backend_comparison.json"  # where the notebook record (JSON) is written
expect: str = "any"  # ok: every run ends ok and EAGLE3 equals greedy; any: no check

# %%
params = dict(
    backends=backends,
    revision=revision,
    dp_policy=dp_policy,
    steps=steps,
    topk=topk,
    draft_tokens=draft_tokens,
    num_prompts=num_prompts,
    prompts=prompts,
    max_new_tokens=max_new_tokens,
    threads=threads,
    max_running=max_running,
    model_dir=model_dir,
    timeout_s=timeout_s,
    repeats=repeats,
    compare_dps=compare_dps,
    sweep_live=sweep_live,
    sweep_backends=sweep_backends,
    sweep_dtypes=sweep_dtypes,
    sweep_num_prompts=sweep_num_prompts,
    sweep_max_new_tokens=sweep_max_new_tokens,
    expect=expect,
)
config = notebook.run_config(COMPARISON.apply(params))
repeats = repeats or COMPARISON.repeats

# %% [markdown]
# ## Runs: greedy and EAGLE3 per backend, repeated
# `compare_dps` adds DP sizes: at dp 2 the same prompts are split over two rank processes, and the
# table shows what DP attention costs per forward (the token-count all_gather and the MLP
# all_gather / all_reduce, waits for the slower rank included) next to the tokens/s.

# %%
records = {}
with progress("compare") as on_event:
    doc = compare(
        config, backends, repeats=repeats, dps=compare_dps, verbose=False, records_out=records, on_event=on_event
    )
views.compare_table(doc)

# %% [markdown]
# ## Speedup of EAGLE3 over greedy
# The median of the per-repeat ratios EAGLE3 tokens/s / greedy tokens/s, with its interval, the
# interval's exact coverage and the verdict. *Outputs identical* checks losslessness: every EAGLE3
# run produced the greedy tokens.

# %%
print(doc["headline"])
display(views.speedup_table(doc))
plots.show(plots.speedup_intervals(doc))

# %% [markdown]
# ## Tokens/s: every repeat and the interval
# Dots are single runs; bars are the median and its interval. Below, each backend against each
# other backend of the same mode, by the same paired ratio.

# %%
plots.show(plots.tokens_per_s_spread(doc))
print("\n".join(views.verdicts(doc)))

# %% [markdown]
# ## What differs per backend: `init_forward_metadata` and attention
# The metadata contracts differ: triton builds `kv_indptr` / `kv_indices` and split counts,
# flashinfer its paged indices, fa3 a page table and `cu_seqlens`, torch_native per-request
# layouts. Below, the cost of one `init_forward_metadata` call per model and forward mode, and per
# forward the attention time (KV write and kernel over all layers) against the rest of the forward.

# %%
display(views.metadata_table(doc))
plots.show(plots.metadata_cost(doc))

# %%
plots.show(plots.attention_split(doc))

# %% [markdown]
# ## Latency per phase (all repeats)
# One sample per phase of one scheduling round (`draft` spans `steps` draft forwards); DP ranks
# without requests are kept apart and not shown here.

# %%
runs = [r for r in records.values() if r.status == "ok"]  # a failed config is a row of the table above
plots.show(plots.phase_latency(runs, mode="eagle"))

# %% [markdown]
# ## Acceptance over (steps, topk, draft tokens), in float32 and bfloat16
# Accept length and acceptance per draft position for each setting. In float32 greedy verification
# is lossless and the backends compute the same tokens, so their results coincide; in bfloat16
# (weights, activations and KV cache cast after loading) each backend's numerics can move tokens:
# the *= fp32 greedy* columns say how far each output still follows the float32 greedy output.
# Backends with identical results share one row and one curve. The live sweep is small (sized for
# the nightly); the full one (8 prompts × 64 tokens, all backends) is a shipped measurement,
# labelled with its date and versions.

# %%
if sweep_live:
    with progress("sweep") as on_event:
        sweep_doc = sweep(
            {
                **config,
                "prompts": notebook.select_prompts(prompts, sweep_num_prompts),
                "max_new_tokens": sweep_max_new_tokens,
            },
            sweep_backends,
            SETTINGS,
            sweep_dtypes,
            on_event=on_event,
        )
    print(provenance(sweep_doc))
    print("\n".join(sweep_doc["findings"]))
    display(views.sweep_table(sweep_doc))
    plots.show(plots.acceptance_sweep(sweep_doc))
else:
    sweep_doc = None

# %%
shipped = load_shipped()
print(provenance(shipped))
print("\n".join(shipped["findings"]))
display(views.sweep_table(shipped))
plots.show(plots.acceptance_sweep(shipped))

# %% [markdown]
# ## Record and expectation
# `expect="ok"` requires every run to finish with EAGLE3 outputs identical to greedy; `"any"` only
# shows the data.

# %%
print(
    "record written to",
    notebook.save_record(
        record_path,
        "03_backend_comparison",
        params,
        records,
        primary=f"eagle/{backends[0]}/dp{compare_dps[0]}#0",
        extra={"compare": doc, "sweep": sweep_doc},
    ),
)

# %%
print(notebook.require(expect, *records.values()))
if expect == "ok":
    assert all(s["lossless"] for s in doc["speedup"]), f"EAGLE3 outputs differ from greedy: {doc['speedup']}"
