"""The notebook face: the run config from a notebook's parameters, prompt choice, the notebook record
(its I/O), the expectation gate, and the backends run side by side under a progress bar. What a
notebook shows comes from ``workbench.views`` (tables, the run's HTML, plots, the crash-bundle and
upstream views); importing this module makes ``RunResult`` render as ``workbench.views.display.run_html``.
It loads no engine (torch) until a function needs one: the nightly and its fast notebooks read and
write notebook records through it.

A notebook writes one *notebook record* (``save_record``) at its ``record_path``: its parameters
and every run record it made, by role (e.g. ``run``; ``reference`` / ``fixed`` / ``undo``;
``eagle/triton``), with one role named primary. ``workbench_ci.nightly`` reads it back with ``load_record``.
(A *crash bundle* is another thing: the batch a forward raised on, ``workbench.debug``.)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.run.labels import record_label
from workbench.run.record import RecordLike, as_record, record_json
from workbench.views.display import run_all, show_runs_as_html

SCHEMA = "workbench.notebook-record/1"
EXPECT_CHOICES = ("crashed", "ok", "any")  # the run record's status words, and any
show_runs_as_html()


class ExpectationError(AssertionError):
    """A notebook's ``expect`` parameter was not met."""


def select_prompts(prompts: list[str] | None = None, num_prompts: int | None = None) -> list[str]:
    """``prompts`` if given, else the first ``num_prompts`` of the shipped set (all when None)."""
    if prompts:
        return list(prompts)
    from workbench.models.loader import load_prompts  # torch: only when prompts are chosen (module docstring)

    shipped = load_prompts()
    return shipped[:num_prompts] if num_prompts else shipped


def run_config(params: Mapping[str, Any], **overrides: Any) -> dict:
    """The run parameters among a notebook's ``params``: its RunConfig fields, with ``prompts`` /
    ``num_prompts`` resolved to the prompt list (``select_prompts``), then ``overrides``. Other
    keys (``backends``, ``expect``, ``record_path``, ...) are the notebook's own. Validated now:
    a bad value raises ConfigError naming it and the valid ones, before anything runs."""
    from workbench.run.config import RunConfig, make_config  # the backends load torch (module docstring)

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    config = {k: v for k, v in params.items() if k in fields}
    config["prompts"] = select_prompts(params.get("prompts"), params.get("num_prompts"))
    config.update(overrides)
    make_config(config)
    return config


def save_record(
    path: str | Path,
    notebook: str,
    parameters: dict,
    runs: Mapping[str, RecordLike],
    primary: str,
    extra: dict | None = None,
) -> Path:
    """Write the notebook record (parameters + run records by role, plus ``extra`` top-level
    entries such as a comparison or a sweep document) as JSON; returns the path."""
    if primary not in runs:
        raise ValueError(f"primary run {primary!r} is not among the runs {sorted(runs)}")
    recs = {role: record_json(r) for role, r in runs.items()}
    doc = {
        "schema": SCHEMA,
        "notebook": notebook,
        "parameters": parameters,
        "primary": primary,
        "status": recs[primary]["status"],
        "runs": recs,
        **(extra or {}),
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, default=str))
    return p


def load_record(path: str | Path) -> dict:
    """Read a notebook record; a bare run record is wrapped as a notebook record with one run, ``run``."""
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") == SCHEMA:
        return doc
    if "status" in doc and "config" in doc:
        return {
            "schema": SCHEMA,
            "notebook": None,
            "parameters": {},
            "primary": "run",
            "status": doc["status"],
            "runs": {"run": doc},
        }
    raise ValueError(f"{path} is neither a notebook record nor a run record")


def require(expect: str, *runs: RecordLike, same_outputs_as: RecordLike | None = None) -> str:
    """The notebook's gate: raise ExpectationError unless every run matches ``expect``.

    ``ok``: status ok (and, given ``same_outputs_as``, the same outputs_sha256); ``crashed``: status
    crashed; ``any``: no check. Returns a one-line verdict."""
    if expect not in EXPECT_CHOICES:
        raise ValueError(f"invalid expect {expect!r}; valid: {', '.join(EXPECT_CHOICES)}")
    if expect == "any":
        return "expect='any': results shown, not checked"
    for run in map(as_record, runs):
        if run.status != expect:
            crash = run.crash
            got = run.status + (f" ({crash.exception_type}: {crash.message})" if crash else "")
            raise ExpectationError(
                f"expect={expect!r} but the {record_label(run, ' ')} run on revision "
                f"{run.config['revision']} dp {run.config['dp']} ended {got}"
            )
        if expect == "ok" and same_outputs_as is not None:
            ref = as_record(same_outputs_as)
            if not same_outputs(run, ref):
                raise ExpectationError(
                    f"outputs differ from the {ref.config['revision']} reference: "
                    f"{run.outputs_sha256} != {ref.outputs_sha256}"
                )
    return f"expect={expect!r}: met by {len(runs)} run(s)"


def same_outputs(a: RecordLike, b: RecordLike) -> bool:
    """Both runs finished and generated the same tokens (equal outputs_sha256)."""
    ha, hb = as_record(a).outputs_sha256, as_record(b).outputs_sha256
    return ha is not None and ha == hb


def compare_backends(
    config: dict, backends: Sequence[str], modes: Sequence[str] = ("greedy", "eagle")
) -> dict[str, Any]:
    """``reproduce`` once per backend and mode, under a progress bar; RunResults keyed ``"<mode>/<backend>"``.
    Crashes are data."""
    from workbench.run.api import reproduce  # the engine (module docstring)

    return run_all(
        {
            f"{mode}/{b}": (
                lambda on_event, b=b, mode=mode: reproduce({**config, "backend": b, "mode": mode}, on_event=on_event)
            )
            for b in backends
            for mode in modes
        },
        desc="backends",
    )
