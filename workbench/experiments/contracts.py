"""Contract fuzzer: every backend x spec-input (per revision) x forward mode through
``init_forward_metadata`` on a minimal valid batch, recording how the call ended: its ``status``
(``ok``, or ``crashed`` with the ``exception``'s class and message).

The spec-input cases are the (mode, spec_info) pairs the engine produces (``spec_cases``); a
spec-input type lacking something a backend reads shows up as a failing cell. An idle rank's verify
pass carries upstream's ``EagleVerifyInput`` idle input (``workbench.speculative.verify_idle``), so
the kv_indptr-reading backends fail on it in a padded IDLE batch at every revision: the live
upstream finding; the engine reaches it only when that batch runs eagerly (``idle_verify="eager"``).

Each cell also carries the end the declared contracts predict (``expected_end``:
``expected_status``, ``expected_exception``): a backend that declares ``reads_spec_kv_indptr`` must
crash with an ``AttributeError`` on a non-empty decode/idle batch whose spec_info lacks
``kv_indptr``, every other cell must end ``ok``. A cell that differs either way is *unexpected*, and
``workbench contracts`` (``workbench/cli/experiments.py``) exits 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from workbench.backends import AttentionBackend, BackendContext, backend_names, create_backend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.engine.model_runner import init_metadata_for
from workbench.mem.pool import KVCache, ReqToTokenPool
from workbench.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from workbench.speculative.revisions import REVISIONS, get_revision

MODES = ("DECODE", "IDLE (padded)", "IDLE (size 0)", "TARGET_VERIFY", "DRAFT_EXTEND", "EXTEND")
PREFIX = torch.tensor([3, 5])  # two requests with cached prefixes
N_VERIFY = 3  # tree tokens per request in the minimal verify batch
H, HEADS, KV_HEADS, D = 16, 2, 1, 16


@dataclass(frozen=True)
class SpecCase:
    """One spec-input type and the modes the engine sends it through."""

    name: str
    modes: Sequence[str]
    make: Callable[[str, ForwardBatch], object]  # (mode, batch) -> spec_info (may read the batch)


def _draft_decode_input(mode: str, fb: ForwardBatch):
    if mode.startswith("IDLE"):
        return EagleDraftInput.create_idle_input("cpu", H, torch.float32, 1, CaptureHiddenMode.NULL)
    if mode == "EXTEND":
        return EagleDraftInput(hidden_states=torch.zeros(fb.num_tokens, 3 * H), verified_id=fb.input_ids)

    kv_indptr, kv_indices = seq_lens_kv_metadata(fb.req_to_token_pool.req_to_token, fb.req_pool_indices, fb.seq_lens)
    return EagleDraftInput(
        hidden_states=torch.zeros(fb.batch_size, H),
        verified_id=fb.input_ids,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
    )


def _verify_input(mode: str, fb: ForwardBatch):
    n, bs = N_VERIFY, fb.batch_size
    if mode.startswith("IDLE"):
        return EagleVerifyInput.create_idle_input(1, n - 1, n)
    blocks = [
        torch.cat((torch.ones(n, int(p), dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()), 1)
        for p in fb.seq_lens.tolist()
    ]
    chain = torch.arange(n).expand(bs, n)
    return EagleVerifyInput(
        draft_token=fb.input_ids,
        custom_mask=torch.cat([b.flatten() for b in blocks]),
        positions=fb.positions,
        retrive_index=chain,
        retrive_next_token=torch.where(chain + 1 < n, chain + 1, -1),
        retrive_next_sibling=torch.full((bs, n), -1),
        spec_steps=n - 1,
        topk=1,
        draft_token_num=n,
    )


def spec_cases(revision: str) -> list[SpecCase]:
    """The (spec-input, modes) pairs the engine produces at ``revision``."""
    rev = get_revision(revision)

    def draft_extend(mode: str, fb: ForwardBatch):
        if mode.startswith("IDLE"):
            return rev.idle_draft_extend_input(H, torch.float32, 1)
        return rev.draft_extend_input(torch.zeros(fb.num_tokens, 3 * H), fb.input_ids, fb.extend_seq_lens - 1)

    return [
        SpecCase("None", ("DECODE", "IDLE (padded)", "IDLE (size 0)", "EXTEND"), lambda m, fb: None),
        SpecCase("EagleDraftInput", ("DECODE", "IDLE (padded)", "IDLE (size 0)", "EXTEND"), _draft_decode_input),
        SpecCase("EagleVerifyInput", ("TARGET_VERIFY", "IDLE (padded)", "IDLE (size 0)"), _verify_input),
        SpecCase(
            f"{rev.draft_extend_class.__name__} (draft-extend)",
            ("DRAFT_EXTEND", "IDLE (padded)", "IDLE (size 0)"),
            draft_extend,
        ),
    ]


def minimal_batch(mode: str, backend: AttentionBackend) -> ForwardBatch:
    """A small valid batch for ``mode`` over a fresh pool: two requests with prefixes 3 and 5."""
    pool = ReqToTokenPool(4, 64)
    pool.req_to_token[1:3, :16] = torch.arange(1, 33, dtype=torch.int32).view(2, 16)
    rows = torch.tensor([1, 2])
    kw = dict(req_to_token_pool=pool, kv_cache=backend.ctx.kv_cache, attn_backend=backend)
    if mode.startswith("IDLE"):
        bs = 1 if mode == "IDLE (padded)" else 0
        z = torch.zeros(bs, dtype=torch.int64)
        return ForwardBatch(ForwardMode.IDLE, bs, z, z, z, torch.ones(bs, dtype=torch.int64), z, **kw)
    if mode == "DECODE":
        seq = PREFIX + 1
        return ForwardBatch(
            ForwardMode.DECODE, 2, torch.tensor([7, 8]), PREFIX.clone(), rows, seq, torch.tensor([4, 22]), **kw
        )
    new = {"TARGET_VERIFY": N_VERIFY, "DRAFT_EXTEND": 2, "EXTEND": 4}[mode]
    lens = torch.full((2,), new)
    seq = PREFIX.clone() if mode == "TARGET_VERIFY" else PREFIX + lens
    t = 2 * new
    return ForwardBatch(
        ForwardMode[mode],
        2,
        torch.arange(t),
        torch.arange(t),
        rows,
        seq,
        torch.arange(1, t + 1),
        extend_seq_lens=lens,
        extend_prefix_lens=PREFIX.clone(),
        **kw,
    )


def expected_end(backend: AttentionBackend, fb: ForwardBatch) -> tuple[str, str | None]:
    """What the declared contracts predict, (status, exception): ``("crashed", "AttributeError")`` where
    a backend that declares reading ``spec_info.kv_indptr`` gets a non-empty decode/idle batch whose
    spec_info lacks it, else ``("ok", None)``."""
    spec, mode = fb.spec_info, fb.forward_mode
    reached = mode.is_decode_or_idle() and fb.batch_size > 0 and spec is not None
    if reached and backend.reads_spec_kv_indptr and not hasattr(spec, "kv_indptr"):
        return "crashed", "AttributeError"
    return "ok", None


def probe(backend_name: str, case: SpecCase, mode: str) -> dict:
    """{status: ok or crashed, exception: the class it raised (None when ok), message, expected_status and
    expected_exception: the contracts' prediction}."""
    ctx = BackendContext(ReqToTokenPool(4, 64), KVCache(1, 64, KV_HEADS, D, torch.float32), HEADS, KV_HEADS, D)
    backend = create_backend(backend_name, ctx)
    fb = minimal_batch(mode, backend)
    fb.spec_info = case.make(mode, fb)
    status, exception = expected_end(backend, fb)
    expected = {"expected_status": status, "expected_exception": exception}
    try:
        called = init_metadata_for(backend, fb)
    except Exception as e:
        return {"status": "crashed", "exception": type(e).__name__, "message": str(e), **expected}
    message = "" if called else "not called: idle batch of size 0 (as the model runner)"
    return {"status": "ok", "exception": None, "message": message, **expected}


def ended(r: dict) -> str:
    """How a cell's call ended in words: ``ok`` or ``crashed (AttributeError)``."""
    return f"crashed ({r['exception']})" if r["status"] == "crashed" else r["status"]


def predicted(r: dict) -> str:
    """What the declared contracts predict for a cell, in the words of `ended`."""
    return ended({"status": r["expected_status"], "exception": r["expected_exception"]})


def unexpected(rows: list[dict]) -> list[dict]:
    """Cells whose end (status and exception) differs from what the declared contracts predict."""
    return [r for r in rows if (r["status"], r["exception"]) != (r["expected_status"], r["expected_exception"])]


def run_matrix(
    backends: Iterable[str] | None = None, revisions: Iterable[str] | None = None, extra_cases: Sequence[SpecCase] = ()
) -> list[dict]:
    """One row per (revision, backend, spec-input, mode) the engine produces, plus ``extra_cases``."""
    rows = []
    for rev in revisions or REVISIONS:
        for be in backends or backend_names():
            for case in list(spec_cases(rev)) + list(extra_cases):
                for mode in case.modes:
                    rows.append(
                        {"revision": rev, "backend": be, "spec_input": case.name, "mode": mode, **probe(be, case, mode)}
                    )
    return rows


def format_failures(rows: list[dict]) -> str:
    """One line of counts, then every cell that crashed or was predicted to, marked ``expected`` or
    ``UNEXPECTED`` (and what the contracts predict)."""
    odd = unexpected(rows)
    bad = [r for r in rows if r["status"] != "ok" or r["expected_status"] != "ok"]
    lines = [
        f"{len(rows)} cells, {sum(r['status'] == 'ok' for r in rows)} ok, "
        f"{sum(r['status'] != 'ok' for r in rows)} crashed, {len(odd)} unexpected"
    ]
    lines += [
        f"  {'UNEXPECTED' if r in odd else 'expected  '} {r['revision']:10s} "
        f"{r['backend']:12s} {r['spec_input']:40s} {r['mode']:14s} {ended(r)}: {r['message']}"
        + (f" (contracts predict {predicted(r)})" if r in odd else "")
        for r in bad
    ]
    return "\n".join(lines)
