"""Draft-tree construction and greedy tree verification (page size 1, as SGLang's EAGLE).

Candidates are every child the draft scored: ``topk`` at step 0 and ``topk * topk`` at each later
step (children of the ``topk`` branches kept at that step). Each has a cumulative path score, a
token and the candidate index of its parent (-1 = the verified root). The tree keeps the global
top ``num_draft_tokens - 1`` by score; a stable sort keeps a parent (higher or equal score,
lower index) ahead of its children, so every kept node's parent is kept too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    """All (bs, N) int64 unless said; node 0 is the root (the last verified token)."""

    tokens: torch.Tensor
    parent: torch.Tensor  # root's parent is -1
    depth: torch.Tensor
    ancestor_mask: torch.Tensor  # (bs, N, N) bool: node i sees node j (ancestors and itself)
    next_token: torch.Tensor  # first child, -1 if none (upstream: retrive_next_token)
    next_sibling: torch.Tensor  # next sibling in tree order, -1 if none
    is_chain: bool = False  # node i is the child of node i - 1 (topk 1): ``greedy_verify`` takes a shortcut

    @property
    def num_nodes(self) -> int:
        return int(self.tokens.shape[1])

    def positions(self, seq_lens: torch.Tensor) -> torch.Tensor:
        """(bs, N) RoPE positions: the root sits at seq_lens (it has no KV yet)."""
        return seq_lens.unsqueeze(1) + self.depth

    def custom_mask(self, seq_lens: torch.Tensor) -> torch.Tensor:
        """Flat bool mask: per request an (N, prefix + N) block, prefix all visible."""
        n = self.num_nodes
        blocks = [
            torch.cat((torch.ones(n, int(s), dtype=torch.bool), m), dim=1).flatten()
            for s, m in zip(seq_lens.tolist(), self.ancestor_mask, strict=False)
        ]
        return torch.cat(blocks) if blocks else torch.empty(0, dtype=torch.bool)


@dataclass
class DraftBranches:
    """The ``topk`` branches a multi-step draft extends, per request, and every candidate so far.

    scores, tokens, cand: (bs, k) cumulative score, token and candidate index of each branch's
    tip; hidden: (bs * k, H) the draft state that predicted the tips; path_slots: (bs, k, i) KV
    slots of each branch's drafted tokens after i draft forwards. cand_*: per expansion, (bs, C_s).
    """

    scores: torch.Tensor
    tokens: torch.Tensor
    cand: torch.Tensor
    hidden: torch.Tensor
    path_slots: torch.Tensor
    cand_scores: list[torch.Tensor] = field(default_factory=list)
    cand_tokens: list[torch.Tensor] = field(default_factory=list)
    cand_parents: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def start(cls, topk_p: torch.Tensor, topk_index: torch.Tensor, hidden: torch.Tensor) -> DraftBranches:
        """Expansion 0: the round state's topk (bs, k) children of the root; hidden (bs, H)."""
        bs, k = topk_p.shape
        branches = cls(
            topk_p,
            topk_index,
            torch.arange(k).expand(bs, k),
            hidden.repeat_interleave(k, 0),
            torch.empty(bs, k, 0, dtype=torch.int64),
        )
        branches._add(topk_p, topk_index, torch.full((bs, k), -1, dtype=torch.int64))
        return branches

    def _add(self, scores: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor) -> None:
        self.cand_scores.append(scores)
        self.cand_tokens.append(tokens)
        self.cand_parents.append(parents)

    def select(
        self, child_p: torch.Tensor, child_t: torch.Tensor, hidden: torch.Tensor, own_slots: torch.Tensor
    ) -> None:
        """One expansion: every branch's topk children become candidates; the best k (by path
        score, ties to the lower index) become the branches. child_p, child_t: (bs * k, k) the
        draft's topk at each tip; hidden (bs * k, H) its states there; own_slots (bs * k, i)
        each branch's path slots, tip included."""
        bs, k = self.scores.shape
        base = sum(c.shape[1] for c in self.cand_scores)
        if k == 1:  # a chain: the one child is the next branch (no ranking to do)
            self.scores, self.tokens = self.scores * child_p, child_t.view(bs, 1)
            self._add(self.scores, self.tokens, self.cand)
            self.cand = torch.full_like(self.cand, base)
            self.hidden, self.path_slots = hidden, own_slots.view(bs, 1, -1)
            return
        rows = torch.arange(bs).unsqueeze(1)
        expand = (self.scores.unsqueeze(2) * child_p.view(bs, k, k)).flatten(1)
        child_t = child_t.view(bs, k * k)
        self._add(expand, child_t, self.cand.repeat_interleave(k, dim=1))
        top = torch.sort(expand, dim=1, descending=True, stable=True).indices[:, :k]
        parent = top // k
        self.scores, self.tokens, self.cand = expand.gather(1, top), child_t.gather(1, top), base + top
        self.hidden = hidden.view(bs, k, -1)[rows, parent].flatten(0, 1)
        self.path_slots = own_slots.view(bs, k, -1)[rows, parent]

    def tree(self, verified_id: torch.Tensor, num_draft_tokens: int) -> DraftTree:
        """The N-node tree of the best candidates under the root ``verified_id`` (bs,)."""
        if self.scores.shape[1] == 1:
            return chain_tree(verified_id, torch.cat(self.cand_tokens, 1), num_draft_tokens)
        return build_tree(
            verified_id,
            torch.cat(self.cand_scores, 1),
            torch.cat(self.cand_tokens, 1),
            torch.cat(self.cand_parents, 1),
            num_draft_tokens,
        )


def select_nodes(scores: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """scores (bs, C) -> (bs, N-1) candidate indices of the kept nodes, in candidate order."""
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, : num_draft_tokens - 1]
    return torch.sort(order, dim=1).values


def build_tree(
    verified_id: torch.Tensor,
    cand_scores: torch.Tensor,
    cand_tokens: torch.Tensor,
    cand_parent: torch.Tensor,
    num_draft_tokens: int,
) -> DraftTree:
    """verified_id (bs,); cand_* (bs, C) with C >= N-1. Returns the N-node tree per request."""
    bs, num_cand = cand_scores.shape
    n = num_draft_tokens
    if num_cand < n - 1:
        raise ValueError(f"{num_cand} draft candidates cannot fill {n - 1} tree slots")
    sel = select_nodes(cand_scores, n)
    node_of_cand = torch.full((bs, num_cand), -1, dtype=torch.int64)
    node_of_cand.scatter_(1, sel, torch.arange(1, n).expand(bs, n - 1))
    par_cand = cand_parent.gather(1, sel)
    par_node = torch.where(par_cand < 0, 0, node_of_cand.gather(1, par_cand.clamp(min=0)))
    if (par_node < 0).any():
        raise RuntimeError("draft tree selection kept a node without its parent")
    parent = torch.cat((torch.full((bs, 1), -1, dtype=torch.int64), par_node), dim=1)
    tokens = torch.cat((verified_id.view(bs, 1), cand_tokens.gather(1, sel)), dim=1)
    anc = ancestor_mask(parent)
    depth = anc.sum(-1) - 1
    first, sibling = child_links(parent)
    return DraftTree(tokens, parent, depth, anc, first, sibling)


def chain_tree(verified_id: torch.Tensor, cand_tokens: torch.Tensor, num_draft_tokens: int) -> DraftTree:
    """topk 1: candidate i is the child of candidate i - 1 and path scores never rise along a
    chain (a product of probabilities), so ``build_tree`` keeps the first N - 1 candidates in
    order. The same tree without ranking: verified_id (bs,), cand_tokens (bs, C), C >= N - 1.
    Its shape tensors are the same every round; they are built once per N and device."""
    bs, num_cand = cand_tokens.shape
    n = num_draft_tokens
    if num_cand < n - 1:
        raise ValueError(f"{num_cand} draft candidates cannot fill {n - 1} tree slots")
    parent, depth, anc, first, sibling = _chain_shape(n, str(cand_tokens.device))
    tokens = torch.cat((verified_id.view(bs, 1), cand_tokens[:, : n - 1]), dim=1)
    return DraftTree(
        tokens,
        parent.expand(bs, n),
        depth.expand(bs, n),
        anc.expand(bs, n, n),
        first.expand(bs, n),
        sibling.expand(bs, n),
        is_chain=True,
    )


@functools.lru_cache(maxsize=16)
def _chain_shape(n: int, device: str) -> tuple[torch.Tensor, ...]:
    """(parent, depth, ancestor mask, first child, next sibling) of an n-node chain, unexpanded."""
    with torch.inference_mode(False), torch.device(device):
        nodes = torch.arange(n)
        first = torch.where(nodes < n - 1, nodes + 1, -1)
        return nodes - 1, nodes, torch.ones(n, n, dtype=torch.bool).tril(), first, torch.full((n,), -1)


def ancestor_mask(parent: torch.Tensor) -> torch.Tensor:
    """parent (bs, N), -1 at the root -> (bs, N, N) bool: node i sees j if j is i or an ancestor.
    Pointer doubling: after round r every node has its ancestors up to distance 2^r."""
    bs, n = parent.shape
    rows = torch.arange(bs).unsqueeze(1)
    ptr = torch.where(parent < 0, torch.arange(n).expand(bs, n), parent)  # the root points at itself
    anc = torch.eye(n, dtype=torch.bool).expand(bs, n, n).clone()
    anc[rows, torch.arange(n), ptr] = True
    for _ in range(max(1, (n - 1).bit_length())):
        anc |= anc[rows, ptr]
        ptr = ptr.gather(1, ptr)
    return anc


def child_links(parent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first child, next sibling) per node, (bs, N) each, -1 where none; children in node order."""
    bs, n = parent.shape
    nodes = torch.arange(n).expand(bs, n)
    key = torch.where(parent < 0, n, parent) * n + nodes  # siblings adjacent, in node order; root last
    order = key.argsort(dim=1)
    par_sorted, node_sorted = parent.gather(1, order), order
    same = par_sorted[:, 1:] == par_sorted[:, :-1]
    sibling = torch.full((bs, n), -1, dtype=torch.int64)
    sibling.scatter_(1, node_sorted[:, :-1], torch.where(same, node_sorted[:, 1:], -1))
    starts = torch.ones(bs, n, dtype=torch.bool)
    starts[:, 1:] = ~same
    first = torch.full((bs, n + 1), -1, dtype=torch.int64)
    has_parent = starts & (par_sorted >= 0)
    first.scatter_(1, torch.where(has_parent, par_sorted, n), torch.where(has_parent, node_sorted, -1))
    return first[:, :n], sibling


def greedy_verify(tree: DraftTree, target_pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Accept the longest root path whose every token equals the target's greedy prediction at
    its parent (upstream's ``verify_tree_greedy``), for all requests and nodes at once.

    A node's children carry distinct tokens (one branch's topk), so at most one child of an
    accepted node matches and the accepted nodes form one path. target_pred: (bs, N) argmax of
    the target at every node. Returns (path (bs, N) node indices padded with -1, root first;
    accept_len (bs,) accepted drafts, root and bonus excluded; bonus (bs,) the target's token
    after the last accepted node).
    """
    bs, n = tree.tokens.shape
    if tree.is_chain:  # node i's parent is i - 1: the accepted path is the run of matches from the root
        run = (tree.tokens[:, 1:] == target_pred[:, :-1]).cumprod(1)
        accept_len = run.sum(1)
        nodes = torch.arange(n).expand(bs, n)
        path = torch.where(nodes <= accept_len.unsqueeze(1), nodes, -1)
        return path, accept_len, target_pred.gather(1, accept_len.unsqueeze(1)).squeeze(1)
    match = tree.tokens == target_pred.gather(1, tree.parent.clamp(min=0))
    match[:, 0] = True
    accepted = ~(tree.ancestor_mask & ~match.unsqueeze(1)).any(-1)  # every node on the way matches
    accept_len = torch.where(accepted, tree.depth, 0).amax(1)
    path = torch.full((bs, n + 1), -1, dtype=torch.int64)
    path.scatter_(1, torch.where(accepted, tree.depth, n), torch.arange(n).expand(bs, n))
    path = path[:, :n]
    return path, accept_len, target_pred.gather(1, path.gather(1, accept_len.unsqueeze(1))).squeeze(1)
