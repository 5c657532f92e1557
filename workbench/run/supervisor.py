"""The one process supervisor: child processes in their own process groups, one deadline, and an end
that terminates, then kills, and says what is left.

Every process the workbench starts and must be able to end (the DP launcher's ranks, the code run
inside a release's interpreter, the CI's notebook jobs) is started by ``Supervisor.start``: its own
session, so a signal to its group reaches what it started too. ``wait`` returns the cause the run
ended by: the caller's ``watch`` (a word it chose), ``exited`` (every process exited) or ``deadline``;
the first cause is kept. ``end`` lets the processes exit for ``wait_s``, then SIGTERMs every group,
SIGKILLs what is left after ``grace_s`` and returns the pids whose group is still alive (should be
none). With ``tree=True`` it also signals the descendants that started sessions of their own (a
notebook kernel's runtime ranks), found with psutil before the first signal.

Python's default SIGTERM ends a process at once, skipping its ``finally`` blocks and so the ``end`` of
every supervisor it holds: its children, in sessions of their own, would outlive it. A long-lived
parent (the nightly runner, every ``workbench`` command, and every module or script entry point that
starts release processes: ``exits_on_sigterm``) runs inside ``sigterm_exits``, where SIGTERM raises
``Terminated``, a ``SystemExit`` with code 143 (128 + SIGTERM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

GRACE_S = 3.0
POLL_S = 0.1
CAUSES = ("exited", "deadline")  # the supervisor's own causes; a watch adds its own words


@dataclass
class Ended:
    """How a supervised run ended: the cause, each process's exit code, the wall time, what is left."""

    cause: str
    exit_codes: list[int | None] = field(default_factory=list)
    wall_s: float = 0.0
    left_running: list[int] = field(default_factory=list)


class Supervisor:
    """Processes in their own process groups under one deadline (module docstring)."""

    def __init__(self, timeout_s: float, grace_s: float = GRACE_S, tree: bool = False) -> None:
        if timeout_s <= 0:
            raise ValueError(f"bad timeout_s {timeout_s!r}; valid: seconds > 0")
        self.t0 = time.monotonic()
        self.deadline = self.t0 + timeout_s
        self.grace_s, self.tree = grace_s, tree
        self.procs: list[subprocess.Popen] = []
        self.cause: str | None = None
        self.left_running: list[int] = []
        self.ended_at: float | None = None

    def start(
        self,
        cmd: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str | os.PathLike | None = None,
        stdout: int | IO[Any] | None = subprocess.DEVNULL,
        stderr: int | IO[Any] | None = subprocess.STDOUT,
        text: bool = False,
    ) -> subprocess.Popen:
        """Start ``cmd`` in a new session (its own process group); OSError when it cannot start."""
        proc = subprocess.Popen(
            list(cmd),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            text=text,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def over(self) -> bool:
        """The deadline has passed."""
        return time.monotonic() > self.deadline

    def stop(self, cause: str) -> str:
        """Keep ``cause`` unless one is kept already; the kept cause."""
        self.cause = self.cause or cause
        return self.cause

    def wait(self, watch: Callable[[], str | None] | None = None, poll_s: float = POLL_S) -> str:
        """Poll until ``watch()`` returns a cause, every process exited, or the deadline; the kept cause."""
        while True:
            cause = watch() if watch is not None else None
            if cause:
                return self.stop(cause)
            if all(p.poll() is not None for p in self.procs):
                return self.stop("exited")
            if self.over():
                return self.stop("deadline")
            time.sleep(poll_s)

    def end(self, wait_s: float = 0.0) -> list[int]:
        """Let the processes exit for ``wait_s``, then SIGTERM, then SIGKILL after ``grace_s``; the pids
        whose group (or, with ``tree``, descendant) is still alive."""
        _wait_all(self.procs, time.monotonic() + wait_s)
        extra = self._descendants() if self.tree else []
        self._signal(signal.SIGTERM, extra)
        _wait_all(self.procs, time.monotonic() + self.grace_s)
        self._signal(signal.SIGKILL, extra)
        _wait_all(self.procs, time.monotonic() + 5)
        alive = [p.pid for p in self.procs] + extra
        deadline = time.monotonic() + self.grace_s  # children of a killed process leave its group a moment later
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if _alive(pid)]
            time.sleep(POLL_S)
        self.left_running = alive
        self.ended_at = time.monotonic()
        return alive

    def ended(self) -> Ended:
        """The run's ``Ended`` (call after ``end``)."""
        return Ended(
            self.cause or "exited",
            [p.returncode for p in self.procs],
            round((self.ended_at or time.monotonic()) - self.t0, 2),
            list(self.left_running),
        )

    def _descendants(self) -> list[int]:
        import psutil  # only the CI's jobs ask for the tree

        out = []
        for p in self.procs:
            try:
                out += [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return out

    def _signal(self, sig: int, extra: list[int]) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in extra:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ended_at is None:
            self.end()


class Terminated(SystemExit):
    """SIGTERM arrived inside ``sigterm_exits``; its code is 128 + SIGTERM (143), a shell's for that signal."""


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """In the block, SIGTERM raises ``Terminated`` in the main thread, so the ``finally``
    blocks that end the supervised processes run; a further SIGTERM while they run is ignored (SIGKILL
    still ends it). The previous handler comes back after the block. Elsewhere than the main thread
    (where Python allows no handler) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, lambda *_: None)
        raise Terminated(128 + signum)

    old = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def exits_on_sigterm(prog: str, main: Callable[[], int | None]) -> int:
    """``main()``'s exit code, run inside ``sigterm_exits``: on SIGTERM its ``finally`` blocks end what it
    started, ``prog: terminated (SIGTERM)`` goes to stderr and the code is 143. For an entry point's
    ``if __name__ == "__main__":`` (``sys.exit(exits_on_sigterm("prog", lambda: main(argv)))``)."""
    try:
        with sigterm_exits():
            return main() or 0
    except Terminated as e:
        print(f"{prog}: terminated (SIGTERM)", file=sys.stderr)
        return int(e.code)


def _wait_all(procs: list[subprocess.Popen], until: float) -> None:
    for p in procs:
        try:
            p.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _alive(pid: int) -> bool:
    """A live process (not a zombie waiting for its reaper) in the process group ``pid``, or ``pid`` itself."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:  # no /proc: ask the kernel (a zombie counts as alive here)
        try:
            os.killpg(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, _ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if (int(entry) == pid or int(pgrp) == pid) and state != "Z":
            return True
    return False
