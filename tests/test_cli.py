"""The command line through ``workbench.cli.main``: every command line written in README.md and docs/
parses (flags in any order, ``--help`` on each sub-command), the quick ones run, and the exit codes
of docs/guide.md's table hold."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from workbench.cli import build_parser, main
from workbench.cli.upstream import _bundle_conclusive
from workbench_ci import nightly

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
PROGRAMS = {
    "workbench": "workbench",
    ".venv/bin/workbench": "workbench",
    "python -m workbench_ci.nightly": "workbench_ci.nightly",
}


def _command(text: str) -> tuple[str, list[str]] | None:
    """(program, argv) when ``text`` is a command line of the workbench or the nightly runner."""
    text = text.replace(r"\|", "|").strip()
    text = re.sub(r"^(\.venv/bin/)?python -m (workbench|ci\.nightly)\b", r"python -m \2", text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value prefixes
        words.pop(0)
    line = " ".join(words)
    for prefix, program in sorted(PROGRAMS.items(), key=lambda kv: -len(kv[0])):
        if line == prefix or line.startswith(prefix + " "):
            argv = shlex.split(line.removeprefix(prefix))
            argv = [w for w in (w.strip("[]") for w in argv) if w]  # [--fix] [--json OUT]: given
            return program, argv
    if line.startswith("python -m workbench "):
        return "workbench", shlex.split(line.removeprefix("python -m workbench"))
    return None


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, program, argv) for every command line in a code block or a code span of the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = FENCE.findall(text)
        lines = [ln for b in blocks for ln in b.replace("\\\n", " ").splitlines()]
        spans = SPAN.findall(FENCE.sub("", text))
        for chunk in lines + spans:
            cmd = _command(chunk)
            if cmd is not None:
                found.append((f"{doc.relative_to(ROOT)}: {chunk.strip()[:90]}", *cmd))
    return found


COMMANDS = documented_commands()
# Documented commands that run here in seconds, with the exit code they must give (the others are parsed,
# and each sub-command's --help is shown).
CRASH_RUN = "workbench run --backend triton --revision {} --dp 2 --dp-policy pack --num-prompts 1 --max-new-tokens 8"
RUN = {
    CRASH_RUN.format("pr-24860") + " --expect crash": 0,  # the crash, as expected
    CRASH_RUN.format("pr-28221") + " --expect crash": 1,  # the fix: no crash
    "workbench contracts --backends triton fa3 --json OUT": 0,
    "workbench upstream fidelity": 0,
}


def test_the_docs_hold_commands():
    programs = {p for _, p, _ in COMMANDS}
    assert len(COMMANDS) > 20 and programs == {"workbench", "workbench_ci.nightly"}, COMMANDS
    listed = {" ".join(["workbench", *argv]) for _, p, argv in COMMANDS if p == "workbench"}
    assert set(RUN) <= listed, f"RUN names commands the docs no longer show: {set(RUN) - listed}"


def command_path(argv: list[str]) -> list[str]:
    """The leading sub-command names of ``argv`` (``["upstream", "lint"]``), read from the parser tree."""
    parser, path = build_parser(), []
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if word.startswith("-") and subs:  # an option of a command group (upstream --cache-dir DIR)
            continue
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
        path.append(word)
    return path


@pytest.mark.parametrize(("where", "program", "argv"), COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_a_documented_command_parses_and_has_help(where, program, argv, capsys):
    """A full command line parses; a bare command name (prose naming it) has its --help."""
    path = command_path(argv) if program == "workbench" else []
    if program == "workbench":
        assert path or not argv, f"{where}: names no workbench command"
        assert main([*path, "--help"]) == 0
        assert capsys.readouterr().out.startswith(" ".join(["usage: workbench", *path]))
    if argv == path:
        return
    if "--help" in argv:
        assert main(argv) == 0, where
        return
    parser = build_parser() if program == "workbench" else nightly.build_parser()
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{where}: does not parse (exit {e.code}): {capsys.readouterr().err}")


@pytest.mark.slow
@pytest.mark.parametrize("line", list(RUN))
def test_a_quick_documented_command_runs(line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WB_BUNDLE_DIR", str(tmp_path / "bundles"))
    argv = [str(tmp_path / "out.json") if w == "OUT" else w for w in shlex.split(line)[1:]]
    assert main(argv) == RUN[line], capsys.readouterr()
    if "--json" in argv:
        assert json.loads((tmp_path / "out.json").read_text())


def test_flags_in_any_order_and_cache_dir_on_either_side(tmp_path):
    p = build_parser()
    a = p.parse_args(["debug", "--fix", "B", "--json", "o.json"])
    b = p.parse_args(["debug", "B", "--json", "o.json", "--fix"])
    assert (a.bundle, a.fix, a.json) == (b.bundle, b.fix, b.json) == (Path("B"), True, Path("o.json"))
    before = p.parse_args(["upstream", "--cache-dir", "D", "lint", "--sglang", "0.5.13"])
    after = p.parse_args(["upstream", "lint", "--sglang", "0.5.13", "--cache-dir", "D"])
    neither = p.parse_args(["upstream", "lint", "--sglang", "0.5.13"])
    assert before.cache_dir == after.cache_dir == Path("D") and neither.cache_dir is None
    assert main(["upstream", "lint", "--cache-dir", str(tmp_path), "--help"]) == 0


def test_usage_errors_exit_2_before_anything_runs(tmp_path, capsys):
    assert main(["run", "--bogus"]) == 2
    assert main(["run", "--dp", "0"]) == 2
    assert "invalid dp 0; valid: an integer >= 1" in capsys.readouterr().err
    assert main(["run", "--backend", "cuda_graph"]) == 2
    assert "invalid choice: 'cuda_graph'" in capsys.readouterr().err
    assert main(["contracts", "--backends", "nope"]) == 2
    assert main(["compare", "--repeats", "1", "--backends", "fa3"]) == 2
    assert "invalid repeats 1" in capsys.readouterr().err
    assert main(["debug", str(tmp_path / "no-such-bundle")]) == 2
    assert "no such bundle directory" in capsys.readouterr().err
    assert main(["upstream"]) == 2
    assert main([]) == 2


def test_fidelity_exits_1_on_a_difference(tmp_path):
    replay = tmp_path / "replay.json"
    fixed = {"config": {"sglang": "0.5.14"}, "status": "ok", "crash": None}
    replay.write_text(json.dumps([{**fixed, "metrics": {"kv_indptr": [0, 1, 2], "kv_indices": [0, 0]}}]))
    assert main(["upstream", "fidelity", "--replay", str(replay)]) == 1  # 0.5.12 / 0.5.13 not replayed: differ
    replay.write_text(json.dumps([{**fixed, "metrics": {"kv_indptr": [0, 1, 3], "kv_indices": [0, 0]}}]))
    assert main(["upstream", "fidelity", "--replay", str(replay), "--json", str(tmp_path / "f.json")]) == 1
    diffs = [d["check"] for d in json.loads((tmp_path / "f.json").read_text())["differences"]]
    assert "seq_lens fallback kv_indptr, padded idle bs 2, vs real 0.5.14" in diffs
    assert "seq_lens fallback kv_indices, padded idle bs 2, vs real 0.5.14" not in diffs


def test_a_bundle_replay_is_conclusive_only_when_it_agrees_with_the_bundle():
    assert _bundle_conclusive({"outcome": "crashed", "same_exception_as_bundle": True})
    assert not _bundle_conclusive({"outcome": "crashed", "same_exception_as_bundle": False})
    assert _bundle_conclusive({"outcome": "ok", "equal_to_reference": True})
    assert not _bundle_conclusive({"outcome": "ok", "equal_to_reference": False})
    assert not _bundle_conclusive({"outcome": "error", "exception": "ImportError: x"})
