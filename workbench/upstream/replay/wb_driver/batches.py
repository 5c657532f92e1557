"""The ``ForwardBatch`` of one replay, by batch kind.

- ``IDLE padded``: an empty IDLE batch padded by the release's own
  ``ForwardBatch._pad_inputs_to_size`` (the DP-attention padding: ``seq_lens=[1,1]``,
  ``req_pool_indices=[0,0]``), batch size 2: what an idle DP rank hands ``init_forward_metadata``;
- ``IDLE unpadded``: the same batch left empty (batch size 0);
- ``DECODE`` / ``TARGET_VERIFY``: two requests (seq_lens 3 and 2) with real slot numbers in
  req_to_token; one token per request, or ``NUM_DRAFT`` draft tokens per request;
- ``EXTEND`` / ``DRAFT_EXTEND*``: two requests extending a cached prefix (prefix 1 and 0, two new
  tokens each; draft-extend: ``NUM_DRAFT`` tokens each), with the extend fields set;
- ``bundle``: a crash bundle's batch (``cfg["bundle"]``): its rows at their row ids, its seq_lens,
  its tokens, as the workbench recorded it (already padded; nothing added).
"""

from __future__ import annotations

from types import SimpleNamespace

from .setup import NUM_DRAFT

ROWS = {0: [1, 2, 3, 11, 12, 13, 14, 15, 16, 17], 1: [4, 5, 21, 22, 23, 24, 25, 26, 27, 28]}


def shape_of(kind: str, bundle: dict | None = None) -> dict:
    """seq_lens / req_pool_indices / tokens per request of a batch kind, before any padding."""
    if bundle:
        return {"seq_lens": bundle["seq_lens"], "req_pool_indices": bundle["req_pool_indices"], "per_req": None}
    if kind.startswith("IDLE"):
        return {"seq_lens": [], "req_pool_indices": [], "per_req": 0}
    if kind.startswith("DRAFT_EXTEND"):
        return {"seq_lens": [3 + NUM_DRAFT, 2 + NUM_DRAFT], "req_pool_indices": [0, 1], "per_req": NUM_DRAFT}
    if kind == "TARGET_VERIFY":
        return {"seq_lens": [3, 2], "req_pool_indices": [0, 1], "per_req": NUM_DRAFT}
    if kind == "DECODE":
        return {"seq_lens": [3, 2], "req_pool_indices": [0, 1], "per_req": 1}
    return {"seq_lens": [3, 2], "req_pool_indices": [0, 1], "per_req": 2}


def fill_rows(ctx, bundle: dict | None = None) -> dict[int, list[int]]:
    """Real slot numbers in req_to_token (the bundle's rows at their row ids, else ROWS); returns the
    rows written, {row: slots}, for the record."""
    torch, pool = ctx.torch, ctx.runner.req_to_token_pool
    rows = dict(zip(bundle["row_ids"], bundle["rows"], strict=False)) if bundle else dict(ROWS)
    for row, slots in rows.items():
        pool.req_to_token[row, : len(slots)] = torch.tensor(slots, dtype=pool.req_to_token.dtype)
    return rows


def make_batch(
    ctx,
    mode: str,
    kind: str,
    spec,
    shape: dict,
    bundle: dict | None = None,
    none: list[str] | tuple = (),
    none_after: list[str] | tuple = (),
) -> tuple[object, list]:
    """(a real ForwardBatch, notes) for `kind` in forward mode `mode`, spec_info `spec`; the fields
    `none` set to None where ``init_new`` returns the batch (before the DP padding), standing for an
    ``init_new`` that leaves them None (the oracle's forward-batch mutants: this batch is built by
    hand, not by ``init_new``); the fields `none_after` set to None after the release's own DP
    padding, standing for a ``_pad_inputs_to_size`` that ends by leaving them None on IDLE."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    torch = ctx.torch
    i64 = dict(dtype=torch.int64, device="cpu")
    notes: list = []
    seq, rpi = shape["seq_lens"], shape["req_pool_indices"]
    if bundle:
        extra = {k: torch.tensor(bundle[k], **i64) for k in ("input_ids", "positions", "out_cache_loc")}
    else:
        n = len(seq) * (shape["per_req"] or 0)
        extra = {
            "input_ids": torch.zeros(n, **i64),
            "positions": torch.zeros(n, **i64),
            "out_cache_loc": torch.arange(40, 40 + n, **i64),
        }
    batch = ForwardBatch(
        forward_mode=getattr(ForwardMode, mode),
        batch_size=len(seq),
        req_pool_indices=torch.tensor(rpi, **i64),
        seq_lens=torch.tensor(seq, **i64),
        seq_lens_sum=int(sum(seq)),
        seq_lens_cpu=torch.tensor(seq, **i64),
        spec_info=spec,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        **extra,
    )
    if not bundle and not kind.startswith(("IDLE", "DECODE")):
        per = shape["per_req"]
        prefix = [s - per for s in seq]
        batch.extend_num_tokens = per * len(seq)
        batch.extend_seq_lens = torch.tensor([per] * len(seq), dtype=torch.int32)
        batch.extend_prefix_lens = torch.tensor(prefix, dtype=torch.int32)
        batch.extend_start_loc = torch.arange(0, per * len(seq), per, dtype=torch.int32)
        batch.extend_seq_lens_cpu = [per] * len(seq)
        batch.extend_prefix_lens_cpu = prefix
        batch.extend_logprob_start_lens_cpu = [0] * len(seq)
    _leave_none(batch, none, "init_new", notes)
    if kind == "IDLE padded":
        pad_idle(ctx, batch, notes)
    elif none_after:
        raise ValueError(f"batch kind {kind!r}: fields None after the DP padding need the 'IDLE padded' batch")
    _leave_none(batch, none_after, "DP padding (_pad_inputs_to_size)", notes)
    return batch, notes


def _leave_none(batch, names: list[str] | tuple, by: str, notes: list) -> None:
    for name in names:
        if not hasattr(batch, name):
            raise AttributeError(f"ForwardBatch has no field {name!r} to leave None")
        setattr(batch, name, None)
        notes.append(f"forward_batch.{name} = None (as the mutated {by} leaves it)")


def pad_idle(ctx, batch, notes: list, bs: int = 2, num_tokens: int = 2) -> None:
    """The release's own DP-attention padding of an empty idle batch to `bs` rows."""
    if getattr(batch, "lora_ids", None) is None:
        batch.lora_ids = []
    try:
        batch._pad_inputs_to_size(ctx.runner, num_tokens=num_tokens, bs=bs)
    except NotImplementedError:  # the backend defines no DP padding fill value (torch_native)
        shim = SimpleNamespace(attn_backend=SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1))
        batch._pad_inputs_to_size(shim, num_tokens=num_tokens, bs=bs)
        notes.append("padded with seq_len fill value 1: the backend defines no get_cuda_graph_seq_len_fill_value")
    batch.batch_size = bs
