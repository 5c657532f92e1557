"""EAGLE3 speculative decoding: prefill, draft (multi-step tree), verify, draft-extend.

Every phase has an idle twin so a DP rank without requests joins the same forwards.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from workbench.engine.model_runner import ModelRunner
from workbench.engine.ops import assign_req_to_token, draft_extend_positions, gather_req_to_token
from workbench.engine.schedule_batch import Req, ScheduleBatch
from workbench.engine.worker import WorkerBase
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.revisions import Revision
from workbench.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from workbench.speculative.eagle_tree import DraftTree, build_tree, greedy_verify


class EagleWorker(WorkerBase):
    def __init__(
        self, target: torch.nn.Module, draft: torch.nn.Module, backend: str, revision: Revision,
        steps: int, topk: int, num_draft_tokens: int, max_running: int, max_context_len: int,
        dp_comm: Optional[object] = None, metrics=None,
    ) -> None:
        branches = max_running * topk
        super().__init__(
            target, backend, max_running, max_context_len, extra_rows=branches,
            extra_slots=branches * steps + max_running * num_draft_tokens, dp_comm=dp_comm, metrics=metrics,
        )
        self.draft = ModelRunner(draft, backend, self.memory, self.memory.allocator.capacity, dp_comm)
        self.revision, self.steps, self.topk, self.num_draft_tokens = revision, steps, topk, num_draft_tokens
        self.hidden_size = draft.config.hidden_size
        self.metrics.proposed_per_step = num_draft_tokens - 1
        self.metrics.max_depth = steps

    # ---- prefill ---------------------------------------------------------------------------
    def prefill(self, reqs: List[Req]) -> ScheduleBatch:
        """Target EXTEND, then draft EXTEND over the prompt shifted by one token."""
        self.check_fits(reqs, self.num_draft_tokens + 1)
        with self.phase("prefill"):
            batch, tfb, aux, slots = self.prefill_target(reqs)
            lens = tfb.seq_lens
            shifted = torch.cat(
                [torch.tensor(r.prompt_ids[1:] + [int(t)], dtype=torch.int64) for r, t in zip(reqs, batch.verified_id)]
            )
            spec = EagleDraftInput(hidden_states=aux, verified_id=shifted)
            fb = self.draft.make_batch(
                ForwardMode.EXTEND, input_ids=shifted, positions=tfb.positions, req_pool_indices=tfb.req_pool_indices,
                seq_lens=lens, out_cache_loc=slots, extend_seq_lens=lens, extend_prefix_lens=torch.zeros_like(lens),
                spec_info=spec, capture_hidden_mode=CaptureHiddenMode.LAST,
            )
            hidden = self.run(self.draft, fb, aux)
            self._set_next_draft(batch, hidden[torch.cumsum(lens, 0) - 1])
        return batch

    def prefill_idle(self) -> None:
        with self.phase("prefill"):
            self.run(self.target, self.target.idle_batch())
            self.run(self.draft, self.draft.idle_batch(self._idle_draft_input()), None)

    # ---- one decode round ------------------------------------------------------------------
    def decode(self, batch: ScheduleBatch) -> ScheduleBatch:
        """draft -> verify -> accept -> draft-extend. Returns the batch without finished requests."""
        with self.phase("draft"):
            tree = self._draft(batch)
        with self.phase("verify"):
            path, accept_len, bonus, aux, slots = self._verify(batch, tree)
        done = self._accept(batch, tree, path, accept_len, bonus, slots)
        self.release(batch, done)
        live = batch.filter(~done)
        if len(live):
            with self.phase("draft-extend"):
                self._draft_extend(live, tree.tokens[~done], path[~done], accept_len[~done], aux[~done])
        elif self.dp_comm is not None:  # upstream runs it under DP attention even with nothing left
            with self.phase("draft-extend"):
                self._draft_extend_idle()
        return live

    def decode_idle(self) -> None:
        with self.phase("draft"):
            for _ in range(self.steps - 1):
                self.run(self.draft, self.draft.idle_batch(self._idle_draft_input()), None)
        with self.phase("verify"):
            self.run(self.target, self.target.idle_batch())
        with self.phase("draft-extend"):
            self._draft_extend_idle()

    # ---- phases ----------------------------------------------------------------------------
    def _idle_draft_input(self) -> EagleDraftInput:
        return EagleDraftInput.create_idle_input("cpu", self.hidden_size, torch.float32, self.topk, CaptureHiddenMode.NULL)

    def _draft_topk(self, hidden: torch.Tensor):
        """hidden (rows, H) -> (probabilities, tokens) of the draft's topk next tokens, (rows, topk) each."""
        return torch.softmax(self.draft.model.logits(hidden), dim=-1).topk(self.topk, dim=-1)

    def _set_next_draft(self, batch: ScheduleBatch, hidden: torch.Tensor) -> None:
        batch.topk_p, batch.topk_index = self._draft_topk(hidden)
        batch.hidden = hidden

    def _draft(self, batch: ScheduleBatch) -> DraftTree:
        """``steps`` expansions (steps - 1 draft DECODE forwards over bs * topk branches)."""
        bs, k = len(batch), self.topk
        rows_b = torch.arange(bs).unsqueeze(1)
        scores, tokens = batch.topk_p, batch.topk_index
        cand_s, cand_t, cand_p = [scores], [tokens], [torch.full((bs, k), -1, dtype=torch.int64)]
        branch_cand = torch.arange(k).expand(bs, k)
        hidden = batch.hidden.repeat_interleave(k, 0)
        prefix = batch.seq_lens.repeat_interleave(k)
        path_slots = torch.empty(bs, k, 0, dtype=torch.int64)
        pool, table = self.memory.req_to_token_pool, self.memory.req_to_token_pool.req_to_token
        branch_rows = torch.tensor(pool.alloc(bs * k), dtype=torch.int64) if self.steps > 1 else None
        used: List[torch.Tensor] = []
        try:
            if branch_rows is not None:
                width = int(batch.seq_lens.max())
                table[branch_rows, :width] = table[batch.req_pool_indices.repeat_interleave(k), :width]
            for i in range(1, self.steps):
                new = self.memory.allocator.alloc(bs * k)
                used.append(new)
                own = torch.cat((path_slots, new.view(bs, k, 1)), dim=2).flatten(0, 1)
                assign_req_to_token(table, branch_rows, prefix, torch.full((bs * k,), i), own.flatten(), self.use_kernels)
                seq_lens = prefix + i
                kv_indptr, kv_indices = seq_lens_kv_metadata(table, branch_rows, seq_lens, self.indices_builder)
                spec = EagleDraftInput(hidden_states=hidden, verified_id=tokens.flatten(), kv_indptr=kv_indptr,
                                       kv_indices=kv_indices, capture_hidden_mode=CaptureHiddenMode.LAST, num_tokens_per_req=k)
                fb = self.draft.make_batch(
                    ForwardMode.DECODE, input_ids=tokens.flatten(), positions=prefix + i - 1, req_pool_indices=branch_rows,
                    seq_lens=seq_lens, out_cache_loc=new, spec_info=spec, capture_hidden_mode=CaptureHiddenMode.LAST,
                )
                out = self.run(self.draft, fb, hidden)
                child_p, child_t = self._draft_topk(out)
                expand = (scores.unsqueeze(2) * child_p.view(bs, k, k)).flatten(1)
                child_t = child_t.view(bs, k * k)
                base = k + (i - 1) * k * k
                cand_s.append(expand)
                cand_t.append(child_t)
                cand_p.append(branch_cand.repeat_interleave(k, dim=1))
                top = torch.sort(expand, dim=1, descending=True, stable=True).indices[:, :k]
                parent_branch = top // k
                scores, tokens = expand.gather(1, top), child_t.gather(1, top)
                branch_cand = base + top
                hidden = out.view(bs, k, -1)[rows_b, parent_branch].flatten(0, 1)
                path_slots = own.view(bs, k, i)[rows_b, parent_branch]
        finally:
            for s in used:
                self.memory.allocator.free(s)
            if branch_rows is not None:
                pool.free(branch_rows.tolist())
        return build_tree(batch.verified_id, torch.cat(cand_s, 1), torch.cat(cand_t, 1), torch.cat(cand_p, 1),
                          self.num_draft_tokens)

    def _verify(self, batch: ScheduleBatch, tree: DraftTree):
        """TARGET_VERIFY over the N tree tokens per request under the tree mask."""
        bs, n = len(batch), self.num_draft_tokens
        slots = self.memory.allocator.alloc(bs * n)
        table = self.memory.req_to_token_pool.req_to_token
        assign_req_to_token(table, batch.req_pool_indices, batch.seq_lens, torch.full((bs,), n), slots, self.use_kernels)
        spec = EagleVerifyInput(
            draft_token=tree.tokens.flatten(), custom_mask=tree.custom_mask(batch.seq_lens),
            positions=tree.positions(batch.seq_lens).flatten(), retrive_index=torch.arange(bs * n).view(bs, n),
            retrive_next_token=tree.next_token, retrive_next_sibling=tree.next_sibling,
            spec_steps=self.steps, topk=self.topk, draft_token_num=n, seq_lens_sum=int(batch.seq_lens.sum()),
        )
        fb = self.target.make_batch(
            ForwardMode.TARGET_VERIFY, input_ids=spec.draft_token, positions=spec.positions,
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens.clone(), out_cache_loc=slots,
            extend_seq_lens=torch.full((bs,), n), extend_prefix_lens=batch.seq_lens.clone(), spec_info=spec,
            capture_hidden_mode=CaptureHiddenMode.FULL,
        )
        hidden, aux = self.run(self.target, fb)
        pred = self.target.model.logits(hidden).argmax(-1).view(bs, n)
        path, accept_len, bonus = greedy_verify(tree, pred)
        return path, accept_len, bonus, aux.view(bs, n, -1), slots.view(bs, n)

    def _accept(self, batch, tree, path, accept_len, bonus, slots) -> torch.Tensor:
        """Keep the KV of root + accepted nodes, free the rest, append tokens. Returns done (bs,)."""
        keep_n = accept_len + 1
        valid = path >= 0
        kept = slots.gather(1, path.clamp(min=0))[valid]
        keep = torch.zeros_like(slots, dtype=torch.bool)
        keep.scatter_(1, torch.where(valid, path, 0), True)  # padding entries re-mark the root
        self.memory.allocator.free(slots[~keep])
        table = self.memory.req_to_token_pool.req_to_token
        assign_req_to_token(table, batch.req_pool_indices, batch.seq_lens, keep_n, kept, self.use_kernels)
        self.metrics.add_accepts(accept_len.tolist())
        toks = tree.tokens.gather(1, path.clamp(min=0))
        for i, r in enumerate(batch.reqs):
            m = int(accept_len[i])
            r.append(toks[i, 1 : m + 1].tolist() + [int(bonus[i])])
        batch.seq_lens = batch.seq_lens + keep_n
        batch.verified_id = bonus
        return self.finished_mask(batch)

    def _draft_extend(self, batch, tree_tokens, path, accept_len, aux) -> None:
        """DRAFT_EXTEND over [accepted drafts..., bonus] with the target states of [root, accepted...]."""
        bs = len(batch)
        n_new = accept_len + 1
        valid = path >= 0
        rows = torch.arange(bs).unsqueeze(1)
        toks = torch.cat((tree_tokens.gather(1, path.clamp(min=0))[:, 1:], torch.full((bs, 1), -1)), 1)
        toks[torch.arange(bs), accept_len] = batch.verified_id
        input_ids = toks[torch.arange(toks.shape[1]).unsqueeze(0) < n_new.unsqueeze(1)]
        hidden = aux[rows.expand_as(path)[valid], path[valid]]
        prefix = batch.seq_lens - n_new
        positions, last = draft_extend_positions(prefix, n_new, input_ids, self.use_kernels)
        if not torch.equal(last, batch.verified_id):
            raise RuntimeError(f"draft-extend inputs lost the bonus tokens: {last.tolist()} vs {batch.verified_id.tolist()}")
        table = self.memory.req_to_token_pool.req_to_token
        slots = gather_req_to_token(table, batch.req_pool_indices, prefix, n_new)
        spec = self.revision.draft_extend_input(hidden, input_ids, accept_len)
        fb = self.draft.make_batch(
            ForwardMode.DRAFT_EXTEND, input_ids=input_ids, positions=positions, req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens.clone(), out_cache_loc=slots, extend_seq_lens=n_new, extend_prefix_lens=prefix,
            spec_info=spec, capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        out = self.run(self.draft, fb, hidden)
        self._set_next_draft(batch, out[torch.cumsum(n_new, 0) - 1])

    def _draft_extend_idle(self) -> None:
        spec = self.revision.idle_draft_extend_input(self.hidden_size, torch.float32, self.topk)
        self.run(self.draft, self.draft.idle_batch(spec), None)
