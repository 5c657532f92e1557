"""Plots for notebooks and the nightly report. Every function takes run records (or history rows),
returns a matplotlib ``Figure`` built without pyplot (Agg-safe, thread-safe) and, given a path,
saves it as PNG and SVG. Backends computed by a stand-in kernel say so in every label."""

from workbench.run.labels import backend_label, record_label
from workbench.views.plots.common import save, show
from workbench.views.plots.compare_plots import attention_split, metadata_cost, speedup_intervals, tokens_per_s_spread
from workbench.views.plots.matrix_plots import crash_matrix
from workbench.views.plots.runs import accept_length_hist, acceptance_per_position, phase_latency
from workbench.views.plots.sweep_plots import acceptance_sweep
from workbench.views.plots.trends import history_trend

__all__ = [
    "acceptance_sweep",
    "attention_split",
    "metadata_cost",
    "speedup_intervals",
    "tokens_per_s_spread",
    "accept_length_hist",
    "acceptance_per_position",
    "backend_label",
    "crash_matrix",
    "history_trend",
    "phase_latency",
    "record_label",
    "save",
    "show",
]
