"""git bisect over a checkout built from 0.5.14's sources (network: needs the wheel and its env)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench.cli import main as workbench_main
from workbench.upstream.bisect import BisectError, commits_between

requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the 0.5.14 wheel; WB_NETWORK_TESTS=1"
)


def test_bad_revisions_are_refused(tmp_path: Path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(BisectError, match="nope"):
        commits_between(tmp_path, "nope", "HEAD")


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.14"])
def test_bisect_names_the_field_removal(version: str, tmp_path: Path) -> None:
    from upstream_checkouts import make_history

    history = make_history(version, tmp_path / "repo", unrelated_after=5)
    out = tmp_path / "bisect.json"
    assert (
        workbench_main(
            [
                "upstream",
                "bisect",
                "--sglang-src",
                str(tmp_path / "repo"),
                "--good",
                history["release"],
                "--bad",
                history["head"],
                "--json",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["first_bad"]["sha"] == history["removal"]
    assert result["first_bad"]["subject"] == "Remove kv_indptr from EagleDraftExtendInput"
    assert result["candidates"] == 6 and result["replays"] == len(result["tried"]) <= 3
    bad = [t for t in result["tried"] if t["bad"]]
    assert all("has no attribute 'kv_indptr'" in t["why"] for t in bad)
    lint = tmp_path / "bisect-lint.json"
    assert (
        workbench_main(
            [
                "upstream",
                "bisect",
                "--sglang-src",
                str(tmp_path / "repo"),
                "--good",
                history["release"],
                "--bad",
                history["head"],
                "--finding",
                "triton|IDLE|EagleDraftExtendInput|kv_indptr",
                "--json",
                str(lint),
            ]
        )
        == 0
    )
    assert json.loads(lint.read_text())["first_bad"]["sha"] == history["removal"]


@pytest.mark.parametrize(
    ("run", "want"),
    [
        ({"status": "crashed", "exception": "AttributeError", "message": "no kv_indptr"}, (True, "AttributeError")),
        ({"status": "ok", "metrics": {"kv_indptr": [0, 1]}}, (False, "ok: kv_indptr=[0, 1]")),
        ({"outcome": "raised", "exception": "AttributeError", "message": "no kv_indptr"}, (True, "AttributeError")),
        ({"outcome": "completed", "metrics": {"kv_indptr": [0]}}, (False, "ok: kv_indptr=[0]")),
    ],
)
def test_a_revision_is_judged_by_how_the_seed_replay_ended(monkeypatch, tmp_path: Path, run: dict, want) -> None:
    """The seed replay's run in the driver's words (status, or outcome written before them) decides bad / good."""
    import workbench.upstream.bisect as b

    monkeypatch.setattr(b, "checkout_tree", lambda tree: tree)
    monkeypatch.setattr(b, "replay", lambda ctx, tree, cases: {"status": "ok", "cases": [{"runs": [run]}]})
    bad, why = b.is_bad(b.UpstreamContext(), tmp_path, None, "0.5.14")
    assert (bad, why.startswith(want[1])) == (want[0], True)


def test_a_replay_stopped_early_cannot_decide(monkeypatch, tmp_path: Path) -> None:
    import workbench.upstream.bisect as b

    monkeypatch.setattr(b, "checkout_tree", lambda tree: tree)
    stopped = {"status": "ok", "stopped_at": "library call", "message": "flashinfer"}
    monkeypatch.setattr(b, "replay", lambda ctx, tree, cases: {"status": "ok", "cases": [{"runs": [stopped]}]})
    with pytest.raises(BisectError, match="could not decide: ok, stopped at library call"):
        b.is_bad(b.UpstreamContext(), tmp_path, None, "0.5.14")
