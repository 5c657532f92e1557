"""What every upstream step shares: the cache, the progress log, the time limits, the env settings.

One `UpstreamContext` is built by the command line (or a notebook) and passed explicitly to the
sources, the static analyser, the replays and the lane, instead of threading `cache_dir`, `log`
and `timeout_s` through every function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

Log = Callable[[str], None]


def echo(message: str) -> None:
    """The default progress log: print and flush at once (progress shows when piped too)."""
    print(message, flush=True)


def quiet(message: str) -> None:
    """A log that drops every message (tests, recall runs over hundreds of mutants)."""


def default_cache_dir() -> Path:
    """The upstream cache: $WB_UPSTREAM_CACHE or ~/.cache/eagle-workbench/upstream."""
    env = os.environ.get("WB_UPSTREAM_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "eagle-workbench" / "upstream"


@dataclass(frozen=True)
class UpstreamContext:
    """The settings of one upstream run.

    cache_dir: wheels, unpacked sources and dependency venvs (shared by every worktree; entries
    are locked per build). log: progress lines. timeout_s: one replay process's wall limit.
    rebuild: rebuild the dependency venvs. env_release: the release whose environment replays a
    checkout (None: the release nearest to the checkout's declared version).
    """

    cache_dir: Path = field(default_factory=default_cache_dir)
    log: Log = echo
    timeout_s: float = 900.0
    rebuild: bool = False
    env_release: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())

    def replace(self, **changes) -> UpstreamContext:
        """A copy with `changes` applied (e.g. `ctx.replace(log=quiet)`)."""
        return dataclasses.replace(self, **changes)

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """An exclusive lock on one entry of the cache (a wheel, a source tree, a venv), so that two
        processes (two sessions, two CI jobs on one runner) never build or delete it at once; the
        second waits. Not re-entrant: never take the same name twice in one process."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / f".{name}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
