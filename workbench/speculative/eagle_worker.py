"""EAGLE3 speculative decoding: prefill, draft (multi-step tree), verify, draft-extend.

One decode round reads top to bottom in ``decode``. The state between rounds lives in
``batch.spec_info`` (an ``EagleDraftInput``), as upstream. Every phase has an idle twin so a DP
rank without requests joins the same forwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.engine.hooks import NO_HOOKS, Hooks
from workbench.engine.metrics import Metrics
from workbench.engine.model_runner import ModelRunner
from workbench.engine.ops import indptr_from_lens
from workbench.engine.schedule_batch import Req, ScheduleBatch
from workbench.engine.worker import WorkerBase
from workbench.speculative.eagle_info import EagleDraftInput, EagleVerifyInput, EagleVerifyOutput
from workbench.speculative.eagle_tree import DraftBranches, DraftTree, greedy_verify
from workbench.speculative.spec_config import SpecConfig
from workbench.speculative.verify_idle import idle_verify_input


class EagleWorker(WorkerBase):
    def __init__(
        self,
        target: torch.nn.Module,
        draft: torch.nn.Module,
        backend: str,
        spec: SpecConfig,
        max_running: int,
        max_context_len: int,
        dp_comm: object | None = None,
        metrics: Metrics | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        branches = max_running * spec.topk
        super().__init__(
            target,
            backend,
            max_running,
            max_context_len,
            extra_rows=branches,
            extra_slots=branches * spec.steps + max_running * spec.num_draft_tokens,
            dp_comm=dp_comm,
            metrics=metrics,
            hooks=hooks,
        )
        self.draft = ModelRunner(draft, backend, self.memory, self.memory.allocator.capacity, dp_comm, hooks)
        self.spec = spec
        self.revision, self.steps, self.topk, self.num_draft_tokens = (
            spec.revision,
            spec.steps,
            spec.topk,
            spec.num_draft_tokens,
        )
        self.hidden_size = draft.config.hidden_size
        self.metrics.proposed_per_step = spec.num_draft_tokens - 1
        self.metrics.max_depth = spec.steps

    # ---- prefill ---------------------------------------------------------------------------
    def prefill(self, reqs: list[Req]) -> ScheduleBatch:
        """Target EXTEND, then draft EXTEND over the prompt shifted by one token."""
        self.check_fits(reqs, max(self.num_draft_tokens, self.steps) + 1)  # verify's tree / a chain's draft path
        with self.phase("prefill"):
            batch, tfb, aux, slots = self.prefill_target(reqs)
            lens = tfb.seq_lens
            shifted = torch.cat(
                [
                    torch.tensor(r.prompt_ids[1:] + [int(t)], dtype=torch.int64)
                    for r, t in zip(reqs, batch.output_ids, strict=False)
                ]
            )
            spec = EagleDraftInput(hidden_states=aux, verified_id=shifted)
            fb = self.draft.make_batch(
                ForwardMode.EXTEND,
                input_ids=shifted,
                positions=tfb.positions,
                req_pool_indices=tfb.req_pool_indices,
                seq_lens=lens,
                out_cache_loc=slots,
                extend_seq_lens=lens,
                extend_prefix_lens=torch.zeros_like(lens),
                spec_info=spec,
                capture_hidden_mode=CaptureHiddenMode.LAST,
            )
            hidden = self.run(self.draft, fb, aux)
            self._set_next_draft(batch, hidden[indptr_from_lens(lens)[1:] - 1])
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
            res = self._verify(batch, tree)
        done = self._accept(batch, res)
        if done.any():
            self.release(batch, done)
            batch, res = batch.filter(~done), res.filter(~done)
        if len(batch):
            with self.phase("draft-extend"):
                self._draft_extend(batch, res)
        elif self.dp_comm is not None:  # upstream runs it under DP attention even with nothing left
            with self.phase("draft-extend"):
                self._draft_extend_idle()
        return batch

    def decode_idle(self) -> None:
        with self.phase("draft"):
            for _ in range(self.steps - 1):
                self.run(self.draft, self.draft.idle_batch(self._idle_draft_input()), None)
        with self.phase("verify"):
            self._verify_idle()
        with self.phase("draft-extend"):
            self._draft_extend_idle()

    # ---- draft -----------------------------------------------------------------------------
    def _idle_draft_input(self) -> EagleDraftInput:
        return EagleDraftInput.create_idle_input(
            torch.get_default_device(), self.hidden_size, torch.float32, self.topk, CaptureHiddenMode.NULL
        )

    def _draft_topk(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (rows, H) -> (probabilities, tokens) of the draft's topk next tokens, (rows, topk) each."""
        return torch.softmax(self.draft.model.logits(hidden), dim=-1).topk(self.topk, dim=-1)

    def _set_next_draft(self, batch: ScheduleBatch, hidden: torch.Tensor) -> None:
        """The round state: hidden (bs, H) the draft's state after each request's last verified token."""
        topk_p, topk_index = self._draft_topk(hidden)
        batch.spec_info = EagleDraftInput(
            topk_p=topk_p, topk_index=topk_index, hidden_states=hidden, verified_id=batch.output_ids
        )

    def _draft(self, batch: ScheduleBatch) -> DraftTree:
        """``steps`` expansions: the round state's topk, then steps - 1 draft DECODE forwards over
        the bs * topk branches, each followed by the choice of the next topk branches."""
        state: EagleDraftInput = batch.spec_info
        branches = DraftBranches.start(state.topk_p, state.topk_index, state.hidden_states)
        if self.steps > 1:
            with self._branch_rows(batch) as (rows, step_slots):
                prefix = batch.seq_lens.repeat_interleave(self.topk)
                self.draft.draft_attn_backend.plan(rows, prefix, self.steps)
                path_cols = prefix.unsqueeze(1) + torch.arange(self.steps - 1)  # (R, steps - 1) in req_to_token
                table = self.memory.req_to_token_pool.req_to_token
                chain = step_slots.t().contiguous() if self.topk == 1 else None  # (bs, steps - 1): the path
                if chain is not None:  # known before the first step: written once (step i reads columns < prefix + i)
                    table[rows.unsqueeze(1), path_cols] = chain.to(table.dtype)
                for i in range(1, self.steps):
                    if chain is not None:
                        own = chain[:, :i]
                    else:  # the branches' paths change with every selection: rewritten per step
                        own = torch.cat((branches.path_slots, step_slots[i - 1].view(len(batch), -1, 1)), dim=2)
                        own = own.flatten(0, 1)
                        table[rows.unsqueeze(1), path_cols[:, :i]] = own.to(table.dtype)
                    hidden = self._draft_step(rows, prefix, step_slots[i - 1], branches, i)
                    branches.select(*self._draft_topk(hidden), hidden, own)
        return branches.tree(state.verified_id, self.num_draft_tokens)

    @contextmanager
    def _branch_rows(self, batch: ScheduleBatch) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Request rows, one per (request, branch), holding the request's slots, and the KV slots
        of every draft step, (steps - 1, bs * topk); the slots are freed on exit. topk 1: the
        requests' own rows (the path goes past ``seq_lens``, where verify writes next). Otherwise
        scratch rows holding a copy of the request's slots, freed on exit."""
        bs, k = len(batch), self.topk
        pool, table = self.memory.req_to_token_pool, self.memory.req_to_token_pool.req_to_token
        scratch = k > 1
        rows = torch.tensor(pool.alloc(bs * k), dtype=torch.int64) if scratch else batch.req_pool_indices
        slots = torch.empty(0, dtype=torch.int64)
        try:
            slots = self.memory.allocator.alloc(bs * k * (self.steps - 1))
            if scratch:
                width = int(batch.seq_lens.max())
                table[rows, :width] = table[batch.req_pool_indices.repeat_interleave(k), :width]
            yield rows, slots.view(self.steps - 1, bs * k)
        finally:
            self.memory.allocator.free(slots)
            if scratch:
                pool.free(rows.tolist())

    def _draft_step(
        self,
        rows: torch.Tensor,
        prefix: torch.Tensor,
        new_slots: torch.Tensor,
        branches: DraftBranches,
        i: int,
    ) -> torch.Tensor:
        """Draft forward i over the branch rows (bs * k,): each tip token at position prefix + i - 1
        sees the prompt and its own path, which the caller wrote into its row's columns
        prefix .. prefix + i - 1 (the tip's slot ``new_slots`` last). Returns hidden (bs * k, H)."""
        tokens = branches.tokens.flatten()
        spec = EagleDraftInput(
            hidden_states=branches.hidden,
            verified_id=tokens,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            num_tokens_per_req=branches.scores.shape[1],
        )
        fb = self.draft.make_batch(
            ForwardMode.DECODE,
            input_ids=tokens,
            positions=prefix + i - 1,
            req_pool_indices=rows,
            seq_lens=prefix + i,
            out_cache_loc=new_slots,
            spec_info=spec,
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        self.draft.draft_attn_backend.init_forward_metadata(fb, i)  # timed there for the observers
        return self.run(self.draft, fb, branches.hidden)

    # ---- verify, accept, draft-extend -------------------------------------------------------
    def _verify(self, batch: ScheduleBatch, tree: DraftTree) -> EagleVerifyOutput:
        """TARGET_VERIFY over the N tree tokens per request under the tree mask."""
        bs, n = len(batch), self.num_draft_tokens
        slots = self.memory.allocator.alloc(bs * n)
        table = self.memory.req_to_token_pool.req_to_token
        self.ops.assign(table, batch.req_pool_indices, batch.seq_lens, torch.full((bs,), n), slots)
        spec = EagleVerifyInput(
            draft_token=tree.tokens.flatten(),
            custom_mask=tree.custom_mask(batch.seq_lens),
            positions=tree.positions(batch.seq_lens).flatten(),
            retrive_index=torch.arange(bs * n).view(bs, n),
            retrive_next_token=tree.next_token,
            retrive_next_sibling=tree.next_sibling,
            spec_steps=self.steps,
            topk=self.topk,
            draft_token_num=n,
            seq_lens_sum=int(batch.seq_lens.sum()),
        )
        fb = self.target.make_batch(
            ForwardMode.TARGET_VERIFY,
            input_ids=spec.draft_token,
            positions=spec.positions,
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens.clone(),
            out_cache_loc=slots,
            extend_seq_lens=torch.full((bs,), n),
            extend_prefix_lens=batch.seq_lens.clone(),
            spec_info=spec,
            capture_hidden_mode=CaptureHiddenMode.FULL,
        )
        hidden, aux = self.run(self.target, fb)
        pred = self.target.model.logits(hidden).argmax(-1).view(bs, n)
        path, accept_len, bonus = greedy_verify(tree, pred)
        return EagleVerifyOutput(tree.tokens, path, accept_len, bonus, aux.view(bs, n, -1), slots.view(bs, n))

    def _accept(self, batch: ScheduleBatch, res: EagleVerifyOutput) -> torch.Tensor:
        """Keep the KV of root + accepted nodes, free the rest, append tokens. Returns done (bs,)."""
        keep_n = res.accept_length + 1
        valid = res.path >= 0
        node = res.path.clamp(min=0)
        keep = torch.zeros_like(res.slots, dtype=torch.bool)
        keep.scatter_(1, node, True)  # padding entries re-mark the root
        self.memory.allocator.free(res.slots[~keep])
        if self.topk > 1:  # a chain keeps a prefix of its nodes: verify already wrote them in place
            table = self.memory.req_to_token_pool.req_to_token
            self.ops.assign(table, batch.req_pool_indices, batch.seq_lens, keep_n, res.slots.gather(1, node)[valid])
        accepted = res.accept_length.tolist()
        self.metrics.add_accepts(accepted)
        self.hooks.on_accepts(accepted)
        toks = res.tree_tokens.gather(1, node)
        for r, row, m, b in zip(batch.reqs, toks.tolist(), keep_n.tolist(), res.bonus.tolist(), strict=False):
            r.append(row[1:m] + [b])
        batch.seq_lens = batch.seq_lens + keep_n
        batch.output_ids = res.bonus
        return self.finished_mask(batch)

    def _draft_extend(self, batch: ScheduleBatch, res: EagleVerifyOutput) -> None:
        """DRAFT_EXTEND over [accepted drafts..., bonus] with the target states of [root, accepted...]."""
        bs = len(batch)
        n_new = res.accept_length + 1
        valid = res.path >= 0
        node = res.path.clamp(min=0)
        toks = torch.cat((res.tree_tokens.gather(1, node)[:, 1:], torch.full((bs, 1), -1)), 1)
        toks[torch.arange(bs), res.accept_length] = batch.output_ids
        input_ids = toks[valid]  # the first n_new of each row, in order
        hidden = res.aux_states[torch.arange(bs).unsqueeze(1).expand_as(node)[valid], node[valid]]
        prefix = batch.seq_lens - n_new
        positions, last = self.ops.draft_extend_inputs(prefix, n_new, input_ids)
        if not torch.equal(last, batch.output_ids):
            raise RuntimeError(
                f"draft-extend inputs lost the bonus tokens: {last.tolist()} vs {batch.output_ids.tolist()}"
            )
        slots = res.slots.gather(1, node)[valid]  # the KV slots _accept kept for [root, accepted...]
        spec = self.revision.draft_extend_input(hidden, input_ids, res.accept_length)
        fb = self.draft.make_batch(
            ForwardMode.DRAFT_EXTEND,
            input_ids=input_ids,
            positions=positions,
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens.clone(),
            out_cache_loc=slots,
            extend_seq_lens=n_new,
            extend_prefix_lens=prefix,
            spec_info=spec,
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        out = self.run(self.draft, fb, hidden)
        self._set_next_draft(batch, out[indptr_from_lens(n_new)[1:] - 1])

    def _verify_idle(self) -> None:
        """The idle rank's TARGET_VERIFY twin: upstream's ``EagleVerifyInput`` idle input on a (padded)
        idle batch, replayed from a graph or run eagerly (``workbench.speculative.verify_idle``)."""
        spec = idle_verify_input(self.spec.verify_idle_input, self.topk, self.steps, self.num_draft_tokens)
        fb = self.target.idle_batch(spec)
        if self.spec.idle_verify == "graph":
            self.target.graph_idle_metadata(fb)
        self.run(self.target, fb)

    def _draft_extend_idle(self) -> None:
        spec = self.revision.idle_draft_extend_input(self.hidden_size, torch.float32, self.topk)
        self.run(self.draft, self.draft.idle_batch(spec), None)
