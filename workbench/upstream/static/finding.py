"""A finding of the contract lint, as a record: the lint's whole one and the shipped compact one.

``Finding`` is the lint's finding with what the guard's steps add: its runner paths and reachability
(static), its verdict and replay run (``replay/verdicts.py``), its end-to-end run (``runtime/e2e.py``).
Those steps still pass its JSON form (``lint.analyse`` writes it); ``guard.check`` reads each one once,
strictly (``read_findings``), and the gate, SARIF, the lane and the views read fields.
``ShippedFinding`` is its compact form in ``workbench/assets/upstream_findings.json``
(``scripts/ship_upstream.py``): installs counted with their sites, runner paths as counts per fate,
the replay run without its arguments and reads and with its stand-ins as indices into the file's
``stand_ins`` list. Both serialise through ``workbench.run.serialise``; the keys a later step adds
(``replay``, ``replay_verdict``, ``static_verdict``, ``end_to_end``, ...) are ``ABSENT`` until it does,
so each form writes back key for key. The JSON shape is documented in docs/upstream-guard.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.run.serialise import RecordError, absent_key, from_dict


@dataclass
class Install:
    """One place a worker installs the finding's class as ``spec_info`` in its mode (``installs.py``)."""

    file: str
    line: int
    function: str
    kind: str
    mode_from: str
    batch: str | None = None


@dataclass
class Reachability:
    """The settings that reach a finding along its first reaching runner path (``reach.py``); the
    end-to-end step adds what the real runtime's run answered (``end_to_end``, ``runtime/e2e.py``)."""

    path: str
    dp_attention: str
    cuda_graph: str
    workers: list[dict]
    algorithms: list[str]
    backend_flags: list[str]
    conditions: list[str]
    end_to_end: dict | None = absent_key()


@dataclass
class ReplayRun:
    """The replay run that decided a finding (``replay/verdicts.py``): its case, how the run ended
    (``status``, ``stopped_at``: ``replay/run_end.py``) and what it saw."""

    case: str
    batch: str | None
    batch_size: int | None
    spec_info_built_by: str | None
    idle_input_args: Any
    init_args: Any
    status: str
    stopped_at: str | None
    exception: str | None
    raised_at: str | None
    library_call: str | None
    reads: Any
    answered: list[str]
    idle_path: str | None
    stand_ins: list[str]
    unpadded: str | None = absent_key()  # an IDLE finding's run on an unpadded batch
    settings: dict[str, int] | None = absent_key()  # the server settings the verdict's replay ran with


@dataclass
class ShippedReplay:
    """A finding's replay run as shipped: no arguments or reads; ``stand_ins`` index the file's list.
    Runs shipped before ``status`` say ``outcome`` (``replay/run_end.py`` reads both)."""

    case: str
    batch: str | None
    spec_info_built_by: str | None
    outcome: str = absent_key()
    status: str = absent_key()
    stopped_at: str | None = absent_key()
    exception: str | None = None
    raised_at: str | None = None
    library_call: str | None = None
    idle_path: str | None = None
    unpadded: str | None = None
    stand_ins: list[int] = field(default_factory=list)


@dataclass(kw_only=True)
class FindingRead:
    """What every form of a finding says: the read, the installed class, and the first install."""

    source: str
    release: str | None
    backend: str
    backend_class: str
    backend_file: str
    mode: str
    spec_class: str
    spec_class_file: str
    spec_class_line: int
    attr: str
    read_file: str
    read_line: int
    read_code: str
    read_function: str
    install_file: str
    install_line: int
    install_function: str
    install_kind: str

    @property
    def read_at(self) -> str:
        """``file:line`` of the read."""
        return f"{self.read_file}:{self.read_line}"


@dataclass(kw_only=True)
class Finding(FindingRead):
    """The lint's finding, with what the guard's later steps add (module docstring)."""

    installs: list[Install]
    set_later: str | None = None
    runner_paths: list[dict] = field(default_factory=list)
    verdict: str | None = None
    verdict_reason: str | None = None
    verdict_by: str | None = None
    reachability: Reachability | None = None
    key: str
    static_verdict: str | None = absent_key()  # a runner-path verdict a replay's confirmation overrode
    static_reason: str | None = absent_key()
    replay: ReplayRun | None = absent_key()
    replay_verdict: str | None = absent_key()  # the replay's verdict beside a static one that stands
    replay_reason: str | None = absent_key()
    end_to_end: dict | None = absent_key()


@dataclass(kw_only=True)
class ShippedFinding(FindingRead):
    """A finding as ``workbench/assets/upstream_findings.json`` ships it (module docstring)."""

    set_later: str | None = None
    verdict: str | None = None
    verdict_reason: str | None = None
    verdict_by: str | None = None
    key: str
    static_verdict: str | None = absent_key()
    static_reason: str | None = absent_key()
    replay_verdict: str | None = absent_key()
    replay_reason: str | None = absent_key()
    installs: int
    install_sites: list[str] = field(default_factory=list)
    runner_paths: dict[str, int] = field(default_factory=dict)
    reachability: Reachability | None = None
    replay: ShippedReplay | None = None


AnyFinding = Finding | ShippedFinding


def read_finding(data: dict) -> AnyFinding:
    """A finding from its JSON form, strictly: shipped when ``installs`` is a count, else the lint's."""
    if not isinstance(data, dict):
        raise RecordError(f"Finding: expected an object (dict), got {type(data).__name__}")
    shipped = isinstance(data.get("installs"), int) and not isinstance(data.get("installs"), bool)
    return from_dict(ShippedFinding, data) if shipped else from_dict(Finding, data)


def read_findings(items: list, where: str) -> list[AnyFinding]:
    """Every finding of a JSON list, strictly; ``RecordError`` names `where`, the index and the field."""
    if not isinstance(items, list):
        raise RecordError(f"{where}: expected a list of findings, got {type(items).__name__}")
    out = []
    for i, data in enumerate(items):
        try:
            out.append(read_finding(data))
        except RecordError as exc:
            raise RecordError(f"{where}[{i}]: {exc}") from None
    return out
