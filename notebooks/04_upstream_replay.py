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
# # 04 · The same crash on the real SGLang releases
#
# Notebooks 01–03 reproduce the regression on the workbench's own engine. This one holds that
# engine against the real code, release by release:
#
# 1. **Survey.** The sglang wheels, read statically with `ast` (never imported): which spec-input
#    classes declare `kv_indptr`, which attention backends read `spec_info.kv_indptr` and how
#    (plain attribute, a None guard, `getattr` with a default), which worker installs which class.
# 2. **Replay.** Per range of releases one cached dependency environment (CPU torch, the imports
#    sglang needs, a torchvision *import stand-in* used only there), the release's own sources
#    first on the path, and, in a subprocess, the real
#    `TritonAttnBackend.init_forward_metadata` on a real DP-padded IDLE `ForwardBatch` whose
#    spec_info is the real `EagleDraftExtendInput.create_idle_input(...)`. 0.5.12 and 0.5.13 ship
#    the class without the field; 0.5.14 ships the fix.
# 3. **Fidelity.** The workbench's contract table against the survey, and its seq_lens fallback
#    for a padded idle batch against what the real 0.5.14 backend produced.
# 4. **Contract fuzzer.** Every backend × spec-input × forward mode of the workbench through
#    `init_forward_metadata`: the whole class of bug, not just this instance.
# 5. **The bug class on real SGLang.** The contract lint over every release, each finding
#    given a verdict by a replay on the real code.
# 6. **Verdicts per release.** How many findings the real code confirms, refutes or traces.
# 7. **Confirmed live findings.** For each on the newest release: a standalone reproducer, the
#    smallest fix shown to stop it, the releases it raises on, and what the engine now models.
#
# With `live = False` it uses the measurements shipped in `workbench/assets/` (no network,
# seconds). With `live = True` it downloads the wheels and builds the environments (1.2–4 min
# and ~2.3 GiB per range of releases the first time, cached afterwards).

# %%
from workbench import notebook
from workbench.experiments import contracts
from workbench.upstream import fidelity, guard_measurements
from workbench.views import guard_tables as views

# %% tags=["parameters"]
releases: list[str] = ["0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.23"]  # surveyed: wheels read with ast, not imported
replay_releases: list[str] = ["0.5.12", "0.5.13", "0.5.14"]  # replayed on the real triton backend
lint_releases: list[str] = ["0.5.12", "0.5.13", "0.5.14", "0.5.23"]  # linted for the bug class, triaged by replays
live: bool = False  # False: the shipped measurements (seconds); True: measure now (network, minutes)
cache_dir = None  # type: str|None  replay cache; None: $WB_UPSTREAM_CACHE or ~/.cache/eagle-workbench/upstream
record_path: str = "runs/notebooks/04_upstream_replay.json"  # where the notebook record (JSON) is written
expect: str = "any"  # ok: replays as upstream says, no fidelity difference; any: no check

# %%
data = guard_measurements.load_measurements(releases, replay_releases, live=live, cache_dir=cache_dir)
print("source:", data["source"])

# %% [markdown]
# ## 1 · What the releases' sources say
# The regressed class ships in 0.5.12–0.5.13(.post1); the field arrives in 0.5.14. Five backends
# read `spec_info.kv_indptr` (triton, flashinfer, flashinfer_mla, aiter, wave); fa3 never does.

# %%
views.survey_table(data["survey"])

# %%
from pathlib import Path  # noqa: E402

from IPython.display import Image  # noqa: E402

from workbench.views.plots.survey_plots import plot_survey  # noqa: E402

Image(filename=str(plot_survey(data["survey"], Path(record_path).parent)[0]))

# %% [markdown]
# ## 2 · The crash on the real code
# The traceback runs through the real `triton_backend.py`: line 332 in 0.5.12 (no None guard),
# line 574 in 0.5.13 (the guard itself reads the missing attribute).

# %%
views.replay_table(data["replays"])

# %%
for rec in data["replays"]:
    if rec.get("crash"):
        print(f"--- sglang {rec['config']['sglang']} ---")
        print(rec["crash"]["traceback"])

# %% [markdown]
# ## 3 · Fidelity of the workbench's contracts
# Reads are *observed* on the workbench's backends (a spy spec_info records every attribute
# touched), then compared with the survey and the replays.

# %%
fid = fidelity.fidelity(fidelity.snapshot_from(data["survey"], data["replays"]))
views.fidelity_table(fid)

# %% [markdown]
# ## 4 · Contract fuzzer on the workbench
# Only the kv_indptr-reading backends fail: on the `pr-24860` padded-IDLE draft-extend cells, and at
# every revision on the padded-IDLE cells of the idle verify input (`EagleVerifyInput`, upstream's
# live finding of section 7).

# %%
cells = contracts.run_matrix()
views.fuzzer_table(cells)

# %% [markdown]
# ## 5 · The whole bug class on real SGLang: lint findings, each triaged by a replay
# `workbench upstream lint --sglang ... --replay` reads every attention backend's
# `init_forward_metadata` (and the same file's helpers) for `spec_info.<attr>` reads, with the
# forward-mode branch and guards of each; every `SpecInput` subclass's attributes; and which class
# each worker installs for which forward mode. A finding is a read the installed class lacks.
# Each gets a verdict from the real code: **confirmed** / **refuted** (the real backend raised, or
# did not, on a real instance: triton under the Triton interpreter, torch_native), **traced: raised**
# / **traced: not read** (a backend whose metadata needs a GPU library, run on CPU with the library
# stubbed up to its first call), **unreachable**, or **unverified** with its reason.
# The same command takes `--sglang-src DIR` for a branch before it merges.

# %%
guard = guard_measurements.load_findings(lint_releases, live=live, cache_dir=cache_dir)
print("source:", guard["source"])
views.findings_table(guard["findings"])

# %% [markdown]
# ## 6 · Verdicts per release
# How many findings of each release the real code decided, and how many it could not
# (`unverified`: each carries its reason in the table above).

# %%
views.verdict_counts(guard["findings"])

# %% [markdown]
# ## 7 · Confirmed live findings on the newest release: reproducers and the smallest fix
# `workbench upstream repro --sglang X --out DIR` writes, for every confirmed idle finding of the
# release, a folder with `repro.py` (a standalone script: it imports only sglang and torch, builds
# the real objects, and raises the error; exit 1), `fix.diff` (the smallest fix, a class-level
# default `None`, PR #28221's shape) and `result.json`: the script on the release, on a copy of the
# release with the fix applied, and on every release from 0.5.10 (where it raises: the range).

# %%
repro = guard_measurements.load_reproducers(live=live, cache_dir=cache_dir)
print(repro["label"])
views.reproducer_table(repro)

# %%
for key in repro["reproducers"]:
    print(views.reproducer_files(repro, key))

# %% [markdown]
# **What the engine now models because of them.** An idle DP rank's verify pass carries upstream's
# `EagleVerifyInput.create_idle_input(...)`, which has no `kv_indptr`; run eagerly, the padded idle
# batch reaches the triton backend's `spec_info.kv_indptr` read. The engine installs the same input
# (`workbench.speculative.verify_idle`) and takes the setting that decides reachability:
# `idle_verify="graph"` (default: the batch replays a CUDA graph, metadata from seq_lens) or
# `"eager"` (the crash), and `verify_idle_input="eagle-verify-fixed"` (the proposed fix). Notebook
# 01's matrix cells `verify-idle-eager` and `verify-idle-eager-fixed` run the crash and the fix;
# docs/design.md §6 lists what the engine still simplifies and which finding each could hide.

# %% [markdown]
# ## Record and expectation
# `expect = "ok"` fails the notebook unless the replays end as upstream says (0.5.12 / 0.5.13
# crashed, 0.5.14 ok), the fidelity check finds no difference, and the fuzzer flags only the hole.

# %%
found = guard_measurements.problems(data, fid, cells, replay_releases)
params = dict(releases=releases, replay_releases=replay_releases, live=live, expect=expect)
runs = guard_measurements.notebook_runs(data, fid, cells, found)
print("record written to", notebook.save_record(record_path, "04_upstream_replay", params, runs, primary="checks"))
print("problems:", found or "none")
if expect == "ok" and found:
    raise notebook.ExpectationError("; ".join(found))
