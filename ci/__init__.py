"""Nightly runner: the notebooks through papermill over a parameter matrix, expectations, report, history.

``python -m workbench_ci.nightly --matrix ci/matrix.yaml --out artifacts/nightly`` (see ``workbench_ci.nightly``).
Modules: ``matrix`` (cells), ``execute`` (one notebook in a child process), ``pool`` (cells in
parallel, progress), ``expect`` (verdicts), ``history`` (SQLite store), ``report`` (HTML + JSON).
"""
