"""The spec input an idle DP rank's verify pass carries, and how that pass builds its metadata.

Upstream's EAGLE workers (V1 ``eagle_worker.py``, V2 ``eagle_worker_v2.py``; from 0.5.16 through
``eagle_worker_common.py``) install ``EagleVerifyInput.create_idle_input(...)`` on an idle rank's verify
batch, and ``EagleVerifyInput`` has no ``kv_indptr``. Under DP attention the idle batch is padded; run
eagerly (``ModelRunner.forward_idle``; from 0.5.14 ``EagerRunner._execute_idle``) it reaches the triton
backend's ``spec_info.kv_indptr`` read and raises ``AttributeError``; replayed from a CUDA graph its
metadata is built from ``seq_lens`` by the graph path and nothing is read. The upstream guard's replay
confirms the read on the real triton backend of every release 0.5.10 to 0.5.23
(``workbench/assets/upstream_findings.json``); the standalone reproducer
(``workbench/assets/upstream_repro/triton-idle-eagleverifyinput-kv-indptr/``) raises on 0.5.11 to
0.5.23 and completes with this module's fix applied to 0.5.23 (on 0.5.10 it stops earlier, at the CUDA
``sgl_kernel`` import that release's memory pools make).

- ``verify_idle_input``: ``eagle-verify`` (upstream's class) or ``eagle-verify-fixed`` (the proposed
  smallest fix: ``kv_indptr: Optional[Tensor] = None``, the shape of PR #28221's draft-extend fix);
- ``idle_verify``: ``graph`` (the idle verify batch replays a CUDA graph: metadata from ``seq_lens``)
  or ``eager`` (``init_forward_metadata`` on the batch, spec input included).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.speculative.eagle_info import EagleVerifyInput


@dataclass
class EagleVerifyInputFixed(EagleVerifyInput):
    """``EagleVerifyInput`` with the proposed fix: ``kv_indptr`` None on the idle input, so the
    backends take their seq_lens fallback."""

    kv_indptr: torch.Tensor | None = None


VERIFY_IDLE_INPUTS: dict[str, type[EagleVerifyInput]] = {
    "eagle-verify": EagleVerifyInput,
    "eagle-verify-fixed": EagleVerifyInputFixed,
}
IDLE_VERIFY_RUNS = ("graph", "eager")


def idle_verify_input(name: str, topk: int, steps: int, num_draft_tokens: int) -> EagleVerifyInput:
    """The idle verify batch's spec input, built as upstream builds it (``create_idle_input``)."""
    if name not in VERIFY_IDLE_INPUTS:
        raise ValueError(f"unknown verify_idle_input {name!r}; valid: {', '.join(VERIFY_IDLE_INPUTS)}")
    return VERIFY_IDLE_INPUTS[name].create_idle_input(topk, steps, num_draft_tokens)
