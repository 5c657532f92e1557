"""The history trend compares like with like: one line per experiment (params_hash) and backend,
identical backends merged, a change of parameters or models a new line with a marked start."""

from __future__ import annotations

import json

from workbench.views.plots import history_trend


def _row(night: int, backend: str, phash: str, accept: float, tps: float, role: str = "eagle/x/dp1#0") -> dict:
    params = {"steps": 5, "topk": 1, "draft_tokens": 6, "max_new_tokens": 64, "dp": 1, "dtype": "float32"}
    return {
        "night_id": night,
        "night": f"n{night}",
        "cell": "03_backend_comparison/dp1",
        "role": role,
        "backend": backend,
        "kernel_stand_in": backend == "fa3",
        "interpreter": False,
        "mode": "eagle",
        "status": "ok",
        "accept_length_mean": accept,
        "tokens_per_s": tps,
        "params_hash": phash,
        "params": json.dumps(params),
    }


def test_a_new_experiment_starts_a_new_line_and_identical_backends_share_one():
    rows = []
    for night in (1, 2, 3):
        phash, accept = ("aaaaaa111111", 4.2) if night < 3 else ("bbbbbb222222", 5.1)  # new models on night 3
        rows += [_row(night, b, phash, accept, 200.0 + 10 * (b == "fa3")) for b in ("torch_native", "fa3")]
    fig = history_trend(rows)
    accept_ax, time_ax = fig.axes[:2]
    labels = [t.get_text() for t in accept_ax.get_legend().get_texts()]
    assert len(labels) == 2 and all("fa3 (torch stand-in) = torch_native" in lab for lab in labels)
    assert any("[aaaaaa]" in lab for lab in labels) and any("[bbbbbb]" in lab for lab in labels)
    assert [list(line.get_xdata()) for line in accept_ax.get_lines()[:2]] == [[0, 1], [2]]
    time_labels = [t.get_text() for t in time_ax.get_legend().get_texts()]
    assert len(time_labels) == 4  # the backends' times differ: a line each, per experiment
    marks = [line for line in accept_ax.get_lines() if list(line.get_xdata()) == [1.5, 1.5]]
    assert marks, "the night the parameters changed is marked"
