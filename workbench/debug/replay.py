"""Replay a crash bundle in the calling process: rebuild the pools, the backend and the
``ForwardBatch``, then call ``init_forward_metadata`` as the model runner does.

Without the fix the bundle's exception is raised again, from the same frame (so ``%debug``
stops at the failing read with ``spec_info`` and ``forward_batch`` live). With the fix the
metadata the backend built is returned, checked against an independent reference computed in
plain Python from the bundle's ``req_to_token`` rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.backends import AttentionBackend, BackendContext, create_backend
from workbench.debug.bundle import DTYPES, BundleError, CrashBundle
from workbench.debug.load import load_bundle
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.engine.model_runner import init_metadata_for
from workbench.mem.pool import KVCache, ReqToTokenPool
from workbench.speculative.eagle_draft_extend_pr28221 import fix_applied, is_fix_applied

MAX_LISTED = 4096  # metadata tensors up to this many elements are returned as lists


@dataclass
class ReplayResult:
    """What a replay that did not raise gives back.

    metadata: the backend's metadata fields (index tensors as lists, others summarised);
    reference: {"kv_indptr", "kv_indices"} from the bundle's rows, or None where the mode has no
    seq_lens fallback; mismatches: what differs (empty when equal).
    """

    bundle: str
    backend: str
    forward_mode: str
    fix: bool
    metadata: dict[str, Any]
    reference: dict[str, list[int]] | None
    mismatches: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def matches_reference(self) -> bool | None:
        return None if self.reference is None else not self.mismatches

    def rows(self, seq_lens: list[int], req_pool_indices: list[int]) -> list[dict]:
        """One dict per batch row: its request row, seq_len and the kv_indices slice it attends to."""
        ptr, idx = self.metadata.get("kv_indptr"), self.metadata.get("kv_indices")
        out = []
        for i, (s, r) in enumerate(zip(seq_lens, req_pool_indices, strict=False)):
            sl = idx[ptr[i] : ptr[i + 1]] if isinstance(ptr, list) and isinstance(idx, list) else None
            ref = self.reference["kv_indices"][sum(seq_lens[:i]) : sum(seq_lens[: i + 1])] if self.reference else None
            out.append(
                {
                    "row": i,
                    "req_pool_index": r,
                    "seq_len": s,
                    "kv_indptr": ptr[i : i + 2] if isinstance(ptr, list) else None,
                    "kv_indices": sl,
                    "reference": ref,
                    "equal": None if ref is None else sl == ref,
                }
            )
        return out

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "matches_reference": self.matches_reference}

    def summary(self) -> str:
        verdict = {True: "equal to the reference", False: "DIFFERS from the reference", None: "no reference"}
        head = (
            f"{self.backend} {self.forward_mode} with the fix {'applied' if self.fix else 'not applied'}: "
            f"metadata {verdict[self.matches_reference]}"
        )
        lines = [head] + [f"  {k}: {v}" for k, v in self.metadata.items()]
        if self.reference is not None:
            lines += [f"  reference {k}: {v}" for k, v in self.reference.items()]
        lines += [f"  mismatch: {m}" for m in self.mismatches] + ([f"  note: {self.note}"] if self.note else [])
        return "\n".join(lines)


def reference_metadata(b: CrashBundle) -> dict[str, list[int]]:
    """kv_indptr = [0, cumsum(seq_lens)], kv_indices = concat(rows[row_of(req_pool_indices[i])][:seq_lens[i]])."""
    rows = b.tensors["req_to_token.rows"].tolist()
    row_of = {r: i for i, r in enumerate(b.tensors["req_to_token.row_ids"].tolist())}
    seq_lens, pool_idx = b.fb("seq_lens").tolist(), b.fb("req_pool_indices").tolist()
    indptr = [0]
    for s in seq_lens:
        indptr.append(indptr[-1] + s)
    indices = [slot for p, s in zip(pool_idx, seq_lens, strict=False) for slot in rows[row_of[p]][:s]]
    return {"kv_indptr": indptr, "kv_indices": indices}


def _spec_info(b: CrashBundle) -> Any:
    cls = b.spec_class()
    if cls is None:
        return None
    kwargs = b.spec_kwargs()
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    extra = sorted(set(kwargs) - init)
    if extra:
        raise BundleError(
            f"crash bundle {b.path}: spec_info fields {extra} are not fields of "
            f"{cls.__module__}.{cls.__qualname__} (fields: {sorted(init)})"
        )
    return cls(**kwargs)


def rebuild(b: CrashBundle) -> tuple[ForwardBatch, AttentionBackend]:
    """The pools (the bundle's rows at their row ids), the backend and the ForwardBatch."""
    a, m = b.meta["attention"], b.meta
    pool = ReqToTokenPool(*m["req_to_token_shape"])
    rows = b.tensors["req_to_token.rows"]
    pool.req_to_token[b.tensors["req_to_token.row_ids"], : rows.shape[1]] = rows.to(pool.req_to_token.dtype)
    slots = [
        int(rows.max()) if rows.numel() else 0,
        int(b.fb("out_cache_loc").max()) if b.fb("out_cache_loc").numel() else 0,
    ]
    kv = KVCache(a["num_layers"], max(slots), a["num_kv_heads"], a["head_dim"], DTYPES[a["dtype"]])
    backend = create_backend(m["backend"], BackendContext(pool, kv, a["num_heads"], a["num_kv_heads"], a["head_dim"]))
    fbm = m.get("forward_batch", {})
    fb = ForwardBatch(
        forward_mode=ForwardMode[m["forward_mode"]],
        batch_size=m["batch_size"],
        input_ids=b.fb("input_ids"),
        positions=b.fb("positions"),
        req_pool_indices=b.fb("req_pool_indices"),
        seq_lens=b.fb("seq_lens"),
        out_cache_loc=b.fb("out_cache_loc"),
        req_to_token_pool=pool,
        kv_cache=kv,
        attn_backend=backend,
        extend_seq_lens=b.fb("extend_seq_lens"),
        extend_prefix_lens=b.fb("extend_prefix_lens"),
        spec_info=_spec_info(b),
        capture_hidden_mode=CaptureHiddenMode[fbm.get("capture_hidden_mode", "NULL")],
        is_padded_idle=bool(fbm.get("is_padded_idle", False)),
    )
    return fb, backend


def init_forward_metadata(backend: AttentionBackend, fb: ForwardBatch) -> None:
    """As ``ModelRunner.forward`` / ``forward_idle`` call it."""
    if fb.forward_mode.is_idle():
        init_metadata_for(backend, fb)
    else:
        backend.init_forward_metadata(fb)


@contextmanager
def fix_state(on: bool) -> Iterator[bool]:
    """Apply the fix in place for the block when ``on`` (undone after, unless it was on already);
    yields whether it is applied."""
    with fix_applied() if on else nullcontext():
        yield is_fix_applied()


def _describe(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        if (not v.is_floating_point()) and v.numel() <= MAX_LISTED:
            return v.tolist()
        return f"{str(v.dtype).removeprefix('torch.')} {list(v.shape)}"
    if v is None or isinstance(v, (int, float, bool, str)):
        return v
    return type(v).__name__


def _compare(md: dict[str, Any], ref: dict[str, list[int]]) -> list[str]:
    out = []
    for k, want in ref.items():
        got = md.get(k)
        if got != want:
            out.append(f"{k}: backend {got} != reference {want}")
    return out


def replay_crash(bundle: str | Path | CrashBundle, fix: bool = False) -> ReplayResult:
    """Replay ``bundle`` (a path or a loaded ``CrashBundle``). Without the fix (and without a prior
    ``apply_fix()``) the recorded exception is raised again; otherwise returns a ``ReplayResult``."""
    b = bundle if isinstance(bundle, CrashBundle) else load_bundle(bundle)
    e = b.meta["exception"]
    with fix_state(fix or bool(b.meta["fix_applied"])) as fixed:
        fb, backend = rebuild(b)
        try:
            init_forward_metadata(backend, fb)
        except Exception as exc:
            exc.add_note(
                f"replayed in-process from crash bundle {b.path} (recorded on rank {b.meta['rank']}: "
                f"{e['type']} at {e['file']}:{e['line']})"
            )
            raise
    md = {f.name: _describe(getattr(fb.attn_metadata, f.name)) for f in dataclasses.fields(fb.attn_metadata)}
    decode_like = fb.forward_mode.is_decode_or_idle()
    ref = reference_metadata(b) if decode_like and "kv_indptr" in md else None
    note = (
        ""
        if ref is not None
        else (
            f"no independent reference: the seq_lens fallback reference covers DECODE/IDLE batches on backends with "
            f"kv_indptr metadata, this is {b.meta['forward_mode']} on {b.meta['backend']}"
        )
    )
    result = ReplayResult(
        str(b.path),
        b.meta["backend"],
        b.meta["forward_mode"],
        fixed,
        md,
        ref,
        _compare(md, ref) if ref is not None else [],
        note,
    )
    if not fixed:
        result.note = (result.note + " " if result.note else "") + (
            f"the recorded {e['type']} was not raised by init_forward_metadata (it came from {e['file']}:{e['line']})"
        )
    return result
