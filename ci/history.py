"""The nightly history: every run of every night in SQLite.

WAL mode and a busy timeout let several runners read and write at once; each night is appended
in one ``BEGIN IMMEDIATE`` transaction, so a night is stored whole or not at all.

Each run row carries ``params_hash``, a hash of everything that defines the experiment the run
belongs to (``params_of``: its settings, prompts and the models' sha256, not the backend), so only
runs of the same experiment are compared across nights: the accept-length check and the trend
lines key on it, and a change of settings or models starts a new line instead of a jump in an old one.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench_ci.results import CellResult

BUSY_TIMEOUT_S = 120.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS nights (
    id INTEGER PRIMARY KEY AUTOINCREMENT, label TEXT NOT NULL, finished_at TEXT NOT NULL,
    verdict TEXT NOT NULL, cells INTEGER NOT NULL, unexpected INTEGER NOT NULL, meta TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    night_id INTEGER NOT NULL REFERENCES nights(id), cell TEXT NOT NULL, role TEXT NOT NULL, notebook TEXT,
    backend TEXT, kernel TEXT, kernel_stand_in INTEGER, interpreter INTEGER, revision TEXT, dp INTEGER,
    mode TEXT, status TEXT, exception_type TEXT, accept_length_mean REAL, acceptance_rate REAL,
    tokens_per_s REAL, wall_s REAL, latency_median_ms TEXT, outputs_sha256 TEXT, cell_verdict TEXT,
    params_hash TEXT, params TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_cell ON runs(cell, role, night_id);
"""
RUN_COLUMNS = (
    "cell",
    "role",
    "notebook",
    "backend",
    "kernel",
    "kernel_stand_in",
    "interpreter",
    "revision",
    "dp",
    "mode",
    "status",
    "exception_type",
    "accept_length_mean",
    "acceptance_rate",
    "tokens_per_s",
    "wall_s",
    "latency_median_ms",
    "outputs_sha256",
    "cell_verdict",
    "params_hash",
    "params",
)
ADDED_COLUMNS = {"params_hash": "TEXT", "params": "TEXT"}  # absent from histories written before them
# run settings that do not define the experiment: what ran it (the backend is a row's own column),
# limits, notes and test hooks
NOT_PARAMS = ("backend", "kernel", "kernel_stand_in", "timeout_s", "extra", "fault", "prompts")


def params_of(rec: dict) -> tuple[str, dict]:
    """(params_hash, params) of a run record: its config without ``NOT_PARAMS``, the prompts as their
    sha256, and the models' sha256 (``config.models_sha256``; absent in records of older versions,
    which then never share a hash with newer ones)."""
    cfg = rec.get("config") or {}
    params = {k: v for k, v in cfg.items() if k not in NOT_PARAMS}
    prompts = json.dumps(cfg.get("prompts"), sort_keys=True).encode()
    params["prompts_sha256"] = hashlib.sha256(prompts).hexdigest()[:16]
    params.setdefault("models_sha256", None)
    text = json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12], params


def run_rows(cells: Iterable[CellResult]) -> list[dict]:
    """One history row per run in the cells' notebook records."""
    rows = []
    for c in cells:
        for role, rec in c.runs().items():
            cfg, m = rec.get("config", {}), rec.get("metrics") or {}
            lat = {k: 1000 * statistics.median(v) for k, v in (m.get("latency_s") or {}).items() if v}
            phash, params = params_of(rec)
            rows.append(
                {
                    "cell": c.name,
                    "role": role,
                    "notebook": c.notebook,
                    "backend": cfg.get("backend"),
                    "kernel": cfg.get("kernel"),
                    "kernel_stand_in": cfg.get("kernel_stand_in"),
                    "interpreter": cfg.get("backend") == "triton" and "interpreter" in str(cfg.get("kernel") or ""),
                    "revision": cfg.get("revision"),
                    "dp": cfg.get("dp"),
                    "mode": cfg.get("mode"),
                    "status": rec.get("status"),
                    "exception_type": (rec.get("crash") or {}).get("exception_type"),
                    "accept_length_mean": m.get("accept_length_mean"),
                    "acceptance_rate": m.get("acceptance_rate"),
                    "tokens_per_s": m.get("tokens_per_s"),
                    "wall_s": m.get("wall_s"),
                    "latency_median_ms": json.dumps(lat),
                    "outputs_sha256": rec.get("outputs_sha256"),
                    "cell_verdict": c.verdict,
                    "params_hash": phash,
                    "params": json.dumps(params, sort_keys=True, default=str),
                }
            )
    return rows


def _retry_locked(step, deadline_s: float = BUSY_TIMEOUT_S):
    """Run ``step`` until it does not fail with "database is locked" (or the deadline passes)."""
    end = time.monotonic() + deadline_s
    delay = 0.01
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > end:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


class History:
    """A history database; open it, use it, ``close()`` it (or use ``with``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        # Switching a new file to WAL while another runner creates it can fail with "database is
        # locked" without waiting on the busy handler, so that step retries on its own.
        _retry_locked(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
        _retry_locked(self._create_schema)

    def _create_schema(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for stmt in filter(str.strip, SCHEMA.split(";")):
                self.db.execute(stmt)
            have = {r[1] for r in self.db.execute("PRAGMA table_info(runs)").fetchall()}
            for col, kind in ADDED_COLUMNS.items():
                if col not in have:
                    self.db.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    def previous_accept_lengths(self) -> dict[tuple[str, str, str], tuple[float, str]]:
        """(cell, role, params_hash) -> (mean accept length, night label) from the latest night with an ok
        EAGLE3 run of that cell and role with the same parameters and models (rows without a hash, from
        before it was kept, match nothing)."""
        rows = self.db.execute(
            "SELECT r.cell, r.role, r.params_hash, r.accept_length_mean, n.label FROM runs r "
            "JOIN nights n ON n.id = r.night_id "
            "WHERE r.status = 'ok' AND r.mode = 'eagle' AND r.accept_length_mean IS NOT NULL "
            "AND r.params_hash IS NOT NULL "
            "AND r.night_id = (SELECT MAX(night_id) FROM runs r2 WHERE r2.cell = r.cell AND r2.role = r.role "
            "AND r2.params_hash = r.params_hash AND r2.status = 'ok' AND r2.mode = 'eagle' "
            "AND r2.accept_length_mean IS NOT NULL)"
        ).fetchall()
        return {(r["cell"], r["role"], r["params_hash"]): (r["accept_length_mean"], r["label"]) for r in rows}

    def append_night(self, label: str, finished_at: str, verdict: str, cells: list[CellResult], meta: dict) -> int:
        """Store a night and all its runs in one transaction; returns the night id."""
        rows = run_rows(cells)
        unexpected = sum(1 for c in cells if c.verdict != "expected")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cur = self.db.execute(
                "INSERT INTO nights (label, finished_at, verdict, cells, unexpected, meta) VALUES (?, ?, ?, ?, ?, ?)",
                (label, finished_at, verdict, len(cells), unexpected, json.dumps(meta, default=str)),
            )
            night = cur.lastrowid
            self.db.executemany(
                f"INSERT INTO runs (night_id, {', '.join(RUN_COLUMNS)}) VALUES (?{', ?' * len(RUN_COLUMNS)})",
                [(night, *(r[k] for k in RUN_COLUMNS)) for r in rows],
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return night

    def trend_rows(self, last_nights: int = 60) -> list[dict]:
        """Runs of the last ``last_nights`` nights with night_id and night label, oldest first."""
        rows = self.db.execute(
            "SELECT r.*, n.label AS night FROM runs r JOIN nights n ON n.id = r.night_id "
            "WHERE r.night_id IN (SELECT id FROM nights ORDER BY id DESC LIMIT ?) ORDER BY r.night_id",
            (last_nights,),
        ).fetchall()
        return [dict(r) for r in rows]

    def nights(self) -> list[dict]:
        """Every stored night, oldest first."""
        return [dict(r) for r in self.db.execute("SELECT * FROM nights ORDER BY id").fetchall()]

    def integrity(self) -> str:
        """``ok`` when SQLite's integrity_check finds nothing wrong."""
        return self.db.execute("PRAGMA integrity_check").fetchone()[0]
