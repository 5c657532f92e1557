"""Tree drafting and greedy verification against brute-force references on random trees."""

from __future__ import annotations

import pytest
import torch

from workbench.speculative.eagle_tree import DraftBranches, build_tree, greedy_verify


def random_candidates(bs: int, steps: int, topk: int, vocab: int, gen: torch.Generator):
    """Candidates shaped like the draft phase makes them: topk at step 0, topk*topk after,
    children of the topk best of the previous step, scores = cumulative products."""
    scores = torch.rand(bs, topk, generator=gen).sort(1, descending=True).values
    tokens = torch.stack([torch.randperm(vocab, generator=gen)[:topk] for _ in range(bs)])
    cs, ct, cp = [scores], [tokens], [torch.full((bs, topk), -1)]
    branch = torch.arange(topk).expand(bs, topk)
    for i in range(1, steps):
        child_p = torch.rand(bs, topk, topk, generator=gen)
        child_p = child_p / child_p.sum(-1, keepdim=True)
        expand = (scores.unsqueeze(2) * child_p).flatten(1)
        child_t = torch.stack(
            [torch.stack([torch.randperm(vocab, generator=gen)[:topk] for _ in range(topk)]) for _ in range(bs)]
        ).view(bs, -1)
        cs.append(expand)
        ct.append(child_t)
        cp.append(branch.repeat_interleave(topk, 1))
        top = torch.sort(expand, dim=1, descending=True, stable=True).indices[:, :topk]
        scores, branch = expand.gather(1, top), topk + (i - 1) * topk * topk + top
    return torch.cat(cs, 1), torch.cat(ct, 1), torch.cat(cp, 1)


def brute_tree(root, scores, tokens, parents, n):
    """Reference for one request: rank all candidates by (-score, index), keep n-1, tree order."""
    order = sorted(range(len(scores)), key=lambda c: (-scores[c], c))[: n - 1]
    kept = sorted(order)
    node = {c: i + 1 for i, c in enumerate(kept)}
    par = [-1] + [0 if parents[c] < 0 else node[parents[c]] for c in kept]
    toks = [root] + [tokens[c] for c in kept]
    return toks, par


def brute_accept(toks, par, pred):
    """Deepest node whose whole root path matches the target's predictions; returns the path."""
    best = [0]
    for j in range(1, len(toks)):
        path, cur = [], j
        while cur != 0:
            path.append(cur)
            cur = par[cur]
        path = [0] + path[::-1]
        if all(toks[c] == pred[p] for p, c in zip(path, path[1:], strict=False)) and len(path) > len(best):
            best = path
    return best


@pytest.mark.parametrize("steps,topk,n", [(1, 1, 2), (3, 1, 4), (5, 4, 16), (6, 10, 32), (3, 3, 10)])
def test_tree_and_verify_match_brute_force(steps, topk, n):
    gen = torch.Generator().manual_seed(steps * 100 + topk)
    bs, vocab = 6, 12
    for _trial in range(5):
        s, t, p = random_candidates(bs, steps, topk, vocab, gen)
        root = torch.randint(0, vocab, (bs,), generator=gen)
        tree = build_tree(root, s, t, p, n)
        for b in range(bs):
            toks, par = brute_tree(int(root[b]), s[b].tolist(), t[b].tolist(), p[b].tolist(), n)
            assert tree.tokens[b].tolist() == toks
            assert tree.parent[b].tolist() == par
            for j in range(n):  # mask = ancestors and self; depth = ancestors
                anc, cur = {j}, j
                while par[cur] >= 0:
                    cur = par[cur]
                    anc.add(cur)
                assert set(tree.ancestor_mask[b, j].nonzero().flatten().tolist()) == anc
                assert int(tree.depth[b, j]) == len(anc) - 1
        # targets that follow a random existing path for a while, then diverge
        pred = torch.randint(0, vocab, (bs, n), generator=gen)
        for b in range(bs):
            cur = 0
            for _ in range(int(torch.randint(0, steps + 1, (1,), generator=gen))):
                kids = [j for j in range(n) if int(tree.parent[b, j]) == cur]
                if not kids:
                    break
                nxt = kids[int(torch.randint(0, len(kids), (1,), generator=gen))]
                pred[b, cur] = tree.tokens[b, nxt]
                cur = nxt
        path, acc, bonus = greedy_verify(tree, pred)
        for b in range(bs):
            ref = brute_accept(tree.tokens[b].tolist(), tree.parent[b].tolist(), pred[b].tolist())
            assert path[b, : len(ref)].tolist() == ref and (path[b, len(ref) :] == -1).all()
            assert int(acc[b]) == len(ref) - 1
            assert int(bonus[b]) == int(pred[b, ref[-1]])


def test_tree_keeps_parents_on_score_ties():
    """Equal scores (a child with probability 1) must still keep the parent ahead of its child."""
    s = torch.tensor([[0.5, 0.5, 0.5, 0.5, 0.2, 0.1]])
    p = torch.tensor([[-1, -1, 0, 0, 1, 1]])
    t = torch.tensor([[1, 2, 3, 4, 5, 6]])
    tree = build_tree(torch.tensor([0]), s, t, p, 4)
    assert tree.parent[0].tolist() == [-1, 0, 0, 1]


def test_too_few_candidates_is_an_error():
    with pytest.raises(ValueError, match="cannot fill"):
        build_tree(torch.tensor([0]), torch.rand(1, 2), torch.zeros(1, 2, dtype=torch.long), torch.full((1, 2), -1), 4)


@pytest.mark.parametrize("k", [3, 1])
def test_draft_branches_keep_the_best_paths_with_their_parents_state(k):
    """DraftBranches.select against a brute-force ranking of every (branch, child) path: the
    best topk paths survive, each with its parent's hidden state and path slots (k 1: the chain path)."""
    gen = torch.Generator().manual_seed(1)
    bs, h = 2, 4
    branches = DraftBranches.start(
        torch.rand(bs, k, generator=gen).sort(1, descending=True).values,
        torch.randint(0, 50, (bs, k), generator=gen),
        torch.randn(bs, h, generator=gen),
    )
    for i in range(1, 4):
        child_p = torch.rand(bs * k, k, generator=gen)
        child_t = torch.randint(0, 50, (bs * k, k), generator=gen)
        hidden = torch.randn(bs * k, h, generator=gen)
        own = torch.randint(1, 1000, (bs * k, i), generator=gen)
        prev, prev_cand = branches.scores.clone(), branches.cand.clone()
        width = sum(c.shape[1] for c in branches.cand_scores)
        branches.select(child_p, child_t, hidden, own)
        for r in range(bs):
            paths = [(float(prev[r, j] * child_p[r * k + j, c]), j, c) for j in range(k) for c in range(k)]
            best = sorted(range(len(paths)), key=lambda m: -paths[m][0])[:k]  # sorted() is stable
            for slot, m in enumerate(best):
                score, j, c = paths[m]
                assert branches.scores[r, slot].item() == pytest.approx(score, rel=0, abs=0)
                assert branches.tokens[r, slot] == child_t[r * k + j, c]
                assert branches.cand[r, slot] == width + j * k + c
                assert torch.equal(branches.hidden[r * k + slot], hidden[r * k + j])
                assert torch.equal(branches.path_slots[r, slot], own[r * k + j])
                assert branches.cand_parents[-1][r, j * k + c] == prev_cand[r, j]
    n = min(8, sum(c.shape[1] for c in branches.cand_scores) + 1)
    tree = branches.tree(torch.tensor([7, 8]), n)
    assert tree.tokens[:, 0].tolist() == [7, 8] and tree.num_nodes == n


@pytest.mark.parametrize("steps,n", [(1, 2), (3, 4), (5, 6), (5, 3), (6, 7)])
def test_the_chain_tree_is_what_the_ranking_keeps_at_topk_one(steps, n):
    """chain_tree (topk 1, no ranking) against build_tree's ranking of the same candidates,
    ties included (a draft probability of exactly 1 keeps the path score)."""
    from workbench.speculative.eagle_tree import chain_tree

    gen = torch.Generator().manual_seed(steps * 10 + n)
    bs = 4
    probs = torch.rand(bs, steps, generator=gen)
    probs[0] = 1.0  # equal scores all along one chain
    scores = probs.cumprod(1)
    tokens = torch.randint(0, 50, (bs, steps), generator=gen)
    parents = (torch.arange(steps) - 1).expand(bs, steps)
    root = torch.randint(0, 50, (bs,), generator=gen)
    ranked, chained = build_tree(root, scores, tokens, parents, n), chain_tree(root, tokens, n)
    for name in ("tokens", "parent", "depth", "ancestor_mask", "next_token", "next_sibling"):
        assert torch.equal(getattr(ranked, name), getattr(chained, name)), name


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_chain_shortcut_of_greedy_verify_equals_the_tree_walk(n):
    """greedy_verify on a chain (is_chain: the run of matches from the root) against the general
    ancestor-mask walk on the same tree, for targets that agree for 0..n-1 positions."""
    import dataclasses

    from workbench.speculative.eagle_tree import chain_tree

    gen = torch.Generator().manual_seed(n)
    bs = 3 * n
    tree = chain_tree(torch.randint(0, 9, (bs,), generator=gen), torch.randint(0, 9, (bs, n - 1), generator=gen), n)
    pred = torch.randint(0, 9, (bs, n), generator=gen)
    for b in range(bs):  # row b agrees with the chain for its first b % n drafts, then (likely) not
        agree = b % n
        pred[b, :agree] = tree.tokens[b, 1 : agree + 1]
    general = dataclasses.replace(tree, is_chain=False)
    for got, want in zip(greedy_verify(tree, pred), greedy_verify(general, pred), strict=True):
        assert torch.equal(got, want)
