"""The one definition of "EAGLE3 against greedy" that ``workbench bench``, ``workbench compare``,
notebook 03 and the nightly's comparison cell run unless told otherwise.

What is compared: the target alone decoding greedily, and EAGLE3 with the chain below, on the
same prompts and token budget, one request at a time (batch 1), with the process's torch threads
(torch's default: one per core; the nightly's runner, which runs notebooks side by side, gives
each one thread through ``OMP_NUM_THREADS``). On the 2-core box the second thread makes greedy
decoding 15 % faster (a decode 3.70 -> 3.13 ms) but the multi-row forwards more (a verify of 8
tokens 6.00 -> 4.37 ms), so EAGLE3 gains more from it (docs/guide.md). ``repeats`` paired
repeats, each running every arm once in a random order, so that the stated interval of every
median covers at >= 95 %.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from workbench.experiments.intervals import min_repeats

SPEC_KEYS = ("steps", "topk", "draft_tokens")


@dataclass(frozen=True)
class Comparison:
    """The comparison's settings; ``apply`` fills a run config's unset keys from them."""

    steps: int = 7  # the chain that measured fastest at batch 1 with the head shipped before fc597ba;
    topk: int = 1  # today's head's accept length and speedup on it: docs/figures.md (bench)
    draft_tokens: int = 8
    num_prompts: int | None = None  # the first N shipped prompts; None: all of them
    max_new_tokens: int = 64
    threads: int | None = None  # None: the process's setting (every arm of a comparison runs in one process)
    max_running: int = 1
    repeats: int = min_repeats()  # 6: the fewest whose median interval reaches 95 %
    order_seed: int = 0  # the random order of the arms within each repeat

    def apply(self, config: dict) -> dict:
        """``config`` with every comparison key it leaves unset (None or absent) taken from here.
        The spec setting is taken whole or not at all: naming any of steps/topk/draft_tokens keeps
        the run defaults for the others."""
        out = dict(config)
        if not any(out.get(k) is not None for k in SPEC_KEYS):
            out.update(steps=self.steps, topk=self.topk, draft_tokens=self.draft_tokens)
        for key in ("max_new_tokens", "threads", "max_running"):
            if out.get(key) is None:
                out[key] = getattr(self, key)
        if out.get("prompts") is None and self.num_prompts is not None:
            from workbench.models.loader import load_prompts  # torch: imported when a run is set up

            out["prompts"] = load_prompts()[: self.num_prompts]
        return out

    def to_dict(self) -> dict:
        return asdict(self)


COMPARISON = Comparison()


def describe(config: dict, backends: list[str], repeats: int) -> str:  # imports torch on use: the CLI reads COMPARISON
    """One line: what a comparison of ``config`` (after ``apply``) over ``backends`` ran."""
    import torch

    from workbench.models.loader import load_prompts

    prompts = config.get("prompts")
    n = len(prompts) if prompts is not None else len(load_prompts())
    spec = tuple(config.get(k) for k in SPEC_KEYS)
    threads = config.get("threads")
    if threads is not None:
        threads = f"{threads} torch thread(s)"
    else:  # compare passes its dp sizes joined: "1", "1/2"
        dps = str(config.get("dp", 1)).split("/")
        parts = [f"{torch.get_num_threads()} torch thread(s) (this process's setting)"] if "1" in dps else []
        if any(d != "1" for d in dps):
            parts.append("the cores divided among the ranks" + (" under DP" if parts else ""))
        threads = " and ".join(parts)
    return (
        f"EAGLE3 {spec} (steps, topk, draft tokens) vs greedy on {', '.join(backends)}: {n} prompts x "
        f"{config.get('max_new_tokens')} new tokens, batch {config.get('max_running')}, "
        f"{threads}, dp {config.get('dp', 1)}, "
        f"{repeats} paired repeats in random order"
    )
