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
# # 06 · The crash on the real SGLang runtime, beside the workbench's engine
#
# Notebooks 01–02 reproduce the regression on the workbench's own SGLang-shaped engine; notebook 04
# replays it on the real releases one function deep. This one runs **the released runtime itself**
# on this CPU: the release's own `Scheduler` and event loop, its `EAGLEWorkerV2` (draft, tree,
# verify, draft-extend), `ModelRunner` and `TritonAttnBackend`, with DP attention over gloo in two
# rank processes, rank 1 given no requests. The models are a tiny Qwen3 target (its layers carry
# the DP-attention gathers) and an EAGLE3 head that SGLang loads as `LlamaForCausalLMEagle3`, both
# byte-level and trained on this Python's standard library (`scripts/train_runtime_models.py`).
#
# **What had to change for a CPU.** Nothing in the code the crash is about. The lane applies a
# handful of CPU shims (a CUDA synchronize, a pinned-memory flag, CUDA-only collectives and tree
# kernels rerouted to SGLang's own Triton or torch versions; the table below lists each with its
# upstream line) and a live guard checks, in every rank, that no shim touched the spec-input
# classes, the attention backends, the DP padding, the runner's idle path or the scheduler's choice
# of spec input.
#
# **What it finds.** On 0.5.14, which carries PR #28221's fix, the idle rank still crashes, one
# pass earlier: the verify pass's padded IDLE batch carries an `EagleVerifyInput`, which has no
# `kv_indptr` either. Declaring the field on the verify input (`--fix verify-input`, from the
# workbench) makes the run complete with outputs equal to DP 1 and to HF transformers. On 0.5.14's
# sources with `EagleDraftExtendInput.kv_indptr` deleted (the state between the two PRs), the
# verify fix lets the run reach the draft-extend pass, where the seed's crash appears in the real
# runtime; PR #28221's field makes it complete. On 0.5.12, whose V1 worker installs the idle
# draft-extend input itself, the seed's crash shows in the released runtime once the two earlier
# idle passes get past (section 3b). On 0.5.23, the newest release, the idle rank raises the same
# verify-pass error, at `triton_backend.py:891`: the upstream guard's live finding, confirmed end to
# end (section 3c); its CPU branches made for the intel_amx backend run as their CUDA branch there
# (device equivalences, section 5b).
#
# With `live = False` the notebook shows the shipped measurement (labelled with its date, commit and
# command); with `live = True` it runs the releases now (about a minute a run on 2 cores, plus a
# one-off 1–4 min environment build).

# %%
from IPython.display import display

import workbench
from workbench import notebook
from workbench.upstream.runtime import measurements
from workbench.upstream.runtime.explore import load_shipped
from workbench.upstream.runtime.report import load_reports
from workbench.views import runtime as views
from workbench.views.runtime_explore import explore_summary, explore_table, reports_table

# %% tags=["parameters"]
release: str = "0.5.14"  # the SGLang release run (shipped measurement: 0.5.12, 0.5.13, 0.5.14, 0.5.23 on triton)
backend: str = "triton"  # the release's attention backend: triton or torch_native
roles = None  # type: list[str]|None  runs by role (dp2, dp1, between+verify-input, v1-dp2, ...); None: the release's
live: bool = False  # False: the shipped measurement (seconds); True: run the release now (about a minute a run)
cache_dir = None  # type: str|None  replay cache; None: $WB_UPSTREAM_CACHE or ~/.cache/eagle-workbench/upstream
workbench_side: bool = True  # also run the workbench's engine on the same crash and fix, side by side
record_path: str = "runs/notebooks/06_real_runtime.json"  # where the notebook record (JSON) is written
expect: str = "any"  # ok: every role ends as upstream does, outputs equal HF's, nothing left; any: no check

# %%
data = measurements.load_runs(release, backend, roles, live=live, cache_dir=cache_dir)
roles = list(data["runs"])
print("source:", data["source"])
runs = data["runs"]

# %% [markdown]
# ## 1 · The runs
# `ranks s` is the rank processes' wall time (start, model load, generation or crash, and ending every
# process); `left running` lists processes still alive after the lane ended them (it must be empty).

# %%
views.runs_table(runs)

# %% [markdown]
# ## 2 · The idle rank's crash, through the real scheduler and worker
# The traceback's frames in SGLang's own files: the scheduler's event loop, `EAGLEWorkerV2.verify`,
# the model runner's idle path (`EagerRunner._execute_idle`), and the read in `triton_backend.py`.

# %%
first = runs.get("dp2") or next(iter(runs.values()))
for line in measurements.sglang_frames(first):
    print(line)
print((first.get("crash") or {}).get("message"))

# %% [markdown]
# ## 3 · The seed's crash between the two PRs, and PR #28221's fix
# The same idle rank, one pass later: the draft-extend pass's padded IDLE batch carries an
# `EagleDraftExtendInput`. SGLang's eager runner pads it itself (`prepare_mlp_sync_batch`: an IDLE
# batch with a spec input gets `num_tokens // num_tokens_per_req` rows, the largest rank's token
# count under max-length padding), so no CUDA graph is needed to reach it.

# %%
for role in ("between+verify-input", "between+verify-input+pr-28221"):
    if role in runs:
        rec = runs[role]
        print(f"--- {role}: {rec['status']}")
        for line in measurements.sglang_frames(rec)[-6:]:
            print(line)

# %% [markdown]
# ## 3b · The seed's crash in a released runtime: 0.5.12's V1 worker
# 0.5.12's `--disable-overlap-schedule` picks the V1 `EAGLEWorker`, whose
# `forward_draft_extend_after_decode` installs `EagleDraftExtendInput.create_idle_input` on the idle
# rank. Run eagerly, that rank stops two passes earlier: 0.5.12's triton idle branch tests
# `spec_info is None` only, so the draft pass reads the idle `EagleDraftInput`'s `kv_indptr` (None,
# `'NoneType' object has no attribute 'shape'`), and the verify pass the `EagleVerifyInput`'s (absent).
# `--fix triton-idle-fallback` backports 0.5.13's fallback (`spec_info.kv_indptr is None` takes the
# seq_lens branch) and `--fix verify-input` declares the verify input's field: the idle rank then
# reaches the draft-extend pass and raises the seed's error in 0.5.12's own `triton_backend.py`;
# PR #28221's field makes it complete. #28221 alone cannot help 0.5.12: without the fallback its None
# field is read as `None.shape`. (On GPUs with CUDA graphs these idle passes replay from graphs and
# never call `init_forward_metadata`; the lane runs them eagerly.) Shown from this notebook's runs
# when `release` is 0.5.12, else from the shipped measurement, labelled.

# %%
if backend == "triton":
    if release.startswith(measurements.V1_RELEASE):
        v1_runs, v1_source = runs, data["source"]
    else:
        v1_data = measurements.load_runs(measurements.V1_RELEASE, "triton", measurements.V1_ROLES)
        v1_runs, v1_source = v1_data["runs"], v1_data["source"]
    print("source:", v1_source)
    display(views.runs_table(v1_runs))
    for role in ("v1-dp2", "v1-dp2+triton-idle-fallback+verify-input"):
        if role in v1_runs:
            print(f"--- {role}: {(v1_runs[role].get('crash') or {}).get('message')}")
            for line in measurements.sglang_frames(v1_runs[role])[-5:]:
                print(line)

# %% [markdown]
# ## 3c · The newest release, 0.5.23: the guard's live finding, end to end
# The upstream guard reports `EagleVerifyInput.kv_indptr` read at `triton_backend.py:891` as live on
# 0.5.23 (confirmed by a one-function replay). Run end to end (`workbench upstream lint --sglang 0.5.23
# --replay --end-to-end`), the release's own runtime raises it on the idle rank's verify pass: the
# finding's verdict becomes `confirmed end to end`. `--fix verify-input` makes the run complete, equal
# to DP 1 and to HF; between the PRs the seed's draft-extend crash is raised at the same line. Shown from
# this notebook's runs when `release` is 0.5.23, else from the shipped measurement, labelled.

# %%
if backend == "triton":
    if release == measurements.NEWEST_RELEASE and "dp2" in runs:
        new_runs, new_source = runs, data["source"]
    else:
        new_data = measurements.load_runs(measurements.NEWEST_RELEASE, "triton")
        new_runs, new_source = new_data["runs"], new_data["source"]
    print("source:", new_source)
    display(views.runs_table(new_runs))
    for line in measurements.sglang_frames(new_runs["dp2"])[-4:]:
        print(line)

# %% [markdown]
# ## 4 · Beside the workbench's engine
# The workbench runs the same code states on its own engine (`revision`), live, in seconds. Its
# model of the idle verify pass carries no spec input (docs/design.md §6), so it does not show the
# verify-pass crash the real runtime raises; the draft-extend crash and its fix are the same.

# %%
wb_runs = {}
if workbench_side:
    for revision in ("pr-24860", "pr-28221"):
        res = workbench.reproduce(
            backend=backend,
            revision=revision,
            dp=2,
            dp_policy="pack",
            prompts=measurements.load_prompts(1),
            steps=3,
            topk=1,
            draft_tokens=4,
            max_new_tokens=8,
        )
        wb_runs[revision] = res.record
    wb_runs["pr-28221 (release 0.5.14's classes)"] = wb_runs["pr-28221"]
views.side_by_side(wb_runs, runs)

# %% [markdown]
# ## 5 · The CPU shims
# Each names the lines of this release it passes; `uses` is SGLang's own version of a rerouted op.

# %%
views.shims_table(first)

# %%
print("shim guard:", first.get("shim_guard"))

# %% [markdown]
# ## 5b · Device equivalences
# Where a release's CPU branch assumes the intel_amx attention backend in code not under test, the
# lane runs that function's own code on its CUDA branch (`_is_cpu` False for that function only):
# the DP padding's seq_len fill value and the verify tree-mask mode, from 0.5.23 (docs/real-runtime.md).
# Each names the release lines of the branch; a release without such a branch installs none.

# %%
eq_runs = new_runs if backend == "triton" else runs
display(views.equivalences_table(eq_runs["dp2"] if "dp2" in eq_runs else first))

# %% [markdown]
# ## 6 · Every configuration of the newest release: the shipped exploration
# `workbench upstream explore --sglang 0.5.23 --json OUT` runs the lane over the speculative
# algorithms and attention backends the release defines, DP 1, 2 and 3 (ranks idle from the start,
# or going idle mid-run), and the overlap schedule on and off. The lane starts EAGLE3, EAGLE (an
# EAGLE-1 head), STANDALONE (a smaller Qwen3 as its draft) and NGRAM (no draft). Each cell is ok
# (equal to HF), crashed (rank, pass, mode, file:line; `known` when a shipped run record holds the
# same crash, else a reproducer command) or limit (the release line, or the lane restriction named
# as one, that stops it here: DFLASH, UNO and DSPARK refuse device cpu in the release's argument
# handling, FROZEN_KV_MTP needs a Gemma4 assistant draft, and 0.5.23 turns the overlap schedule off
# for speculative decoding on CPU, measured on the first overlap-on cell of each algorithm).
# torch_native's first verify pass (`extend_prefix_lens` None at `torch_native_backend.py:101`) is a
# crash, not a limit: the lines that reach it have no device branch, and the release accepts torch_native
# with EAGLE on a GPU once the draft is given a backend (`--speculative-draft-attention-backend`);
# upstream it is sglang issue #36352 (open). EAGLE at DP 3 mid-run crashes with `ZeroDivisionError` at
# `decode_attention.py:125` on every rank's first draft decode, not only an idle one: the EAGLE-1 draft's
# Llama attention splits its heads over the full TP group while its KV pool holds the attention-TP group's
# heads (`kv_group_num` 0); `--fix llama-attn-tp` splits them within the attention-TP group, as Qwen3's
# attention does (docs/real-runtime.md, "The DP 3 EAGLE crash"). Shown from the shipped file (its date,
# versions, command and commit in `source`), not run now; it predates the lane's wait for each rank's
# requests, so which pass its mid-run cells met idle first depended on timing.

# %%
explored = load_shipped()
print("source:", explored["source"])
print("counts:", explored["counts"])
display(explore_summary(explored))
display(explore_table(explored))

# %% [markdown]
# ## 6b · Upstream-ready reports of the crashes confirmed end to end
# One folder per crash in `workbench/assets/upstream_reports/`, written by `python -m
# workbench.upstream.runtime.report --sglang 0.5.23 --out workbench/assets/upstream_reports`: the GPU
# server command (not run on a GPU) with each claim about its flags backed by the release's lines, the
# traceback, the smallest fix as a diff, and the run of a checkout with that diff. The EAGLE-1 draft's
# fix lets the idle rank reach the verify crash next, so its fixed run also takes `--fix verify-input`;
# torch_native's DP fix lets the run reach its verify crash, so its fixed run also carries that report's diff;
# the DP 3 head split's fix lets the mid-run idle rank reach the EAGLE-1 idle crashes, so its fixed run also
# takes `--fix eagle-idle-batch --fix verify-input`.

# %%
display(reports_table(load_reports()))

# %% [markdown]
# ## Record and expectation
# `expect = "ok"` fails the notebook unless every role ends as `measurements.EXPECTED` says for its
# backend (on torch_native: dp 2 crashes at the DP padding's fill value, dp 1 at its first verify pass),
# every completed run equals HF transformers' greedy tokens and the DP 1 run, the guard found nothing,
# and no process was left running.

# %%
found = measurements.problems(runs, backend)
params = dict(release=release, backend=backend, roles=roles, live=live, expect=expect)
wb_roles = {k: v for k, v in wb_runs.items() if k in ("pr-24860", "pr-28221")}
nb_runs = measurements.notebook_runs(data, wb_roles, found)
print("record written to", notebook.save_record(record_path, "06_real_runtime", params, nb_runs, primary="checks"))
print("problems:", found or "none")
if expect == "ok" and found:
    raise notebook.ExpectationError("; ".join(found))
