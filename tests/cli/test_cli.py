"""The command line through ``workbench.cli.main``: every command line written in README.md and docs/
parses (flags in any order, ``--help`` on each sub-command), the quick ones run, and the exit codes
of docs/guide.md's table hold. Parsing imports no torch, every option has help, a flag has one form on
every command, and bare ``bench`` and ``compare`` run the torch paths."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import build_parser, flags, main
from workbench.cli.upstream import _bundle_conclusive
from workbench_ci import nightly

ROOT = Path(__file__).resolve().parents[2]
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
    CRASH_RUN.format("pr-24860") + " --expect crashed": 0,  # the crash, as expected
    CRASH_RUN.format("pr-28221") + " --expect crashed": 1,  # the fix: no crash
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
        assert path or argv in ([], ["--help"]), f"{where}: names no workbench command"
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
    a = p.parse_args(["debug", "--fix", "pr-28221", "B", "--json", "o.json"])
    b = p.parse_args(["debug", "B", "--json", "o.json", "--fix", "pr-28221"])
    assert (a.bundle, a.fix, a.json) == (b.bundle, b.fix, b.json) == (Path("B"), "pr-28221", Path("o.json"))
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
    rows = {"padded_batch": {"req_to_token_rows": {"0": [1, 2, 3], "1": [4, 5, 6]}}}  # the table the driver used
    replay.write_text(json.dumps([{**fixed, "metrics": {"kv_indptr": [0, 1, 2], "kv_indices": [1, 1], **rows}}]))
    assert main(["upstream", "fidelity", "--replay-json", str(replay)]) == 1  # 0.5.12 / 0.5.13 not replayed: differ
    replay.write_text(json.dumps([{**fixed, "metrics": {"kv_indptr": [0, 1, 3], "kv_indices": [1, 1], **rows}}]))
    assert main(["upstream", "fidelity", "--replay-json", str(replay), "--json", str(tmp_path / "f.json")]) == 1
    diffs = [d["check"] for d in json.loads((tmp_path / "f.json").read_text())["differences"]]
    assert "seq_lens fallback kv_indptr, padded idle bs 2, vs real 0.5.14" in diffs
    assert "seq_lens fallback kv_indices, padded idle bs 2, vs real 0.5.14" not in diffs


def test_a_bundle_replay_is_conclusive_only_when_it_agrees_with_the_bundle():
    assert _bundle_conclusive({"status": "crashed", "same_exception_as_bundle": True})
    assert not _bundle_conclusive({"status": "crashed", "same_exception_as_bundle": False})
    assert _bundle_conclusive({"status": "ok", "equal_to_reference": True})
    assert not _bundle_conclusive({"status": "ok", "equal_to_reference": False})
    assert not _bundle_conclusive({"status": "error", "exception": "ImportError: x"})


HEAVY = ("torch", "numpy", "triton", "transformers", "matplotlib")
COMMAND_PATHS = [name.split()[1:] for name, _ in flags.commands(build_parser())]
SRC_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's workbench, not an installed one


def _imported(importtime: str) -> set[str]:
    """The modules a ``python -X importtime`` run imported, from its stderr."""
    lines = [ln.split("|") for ln in importtime.splitlines() if ln.startswith("import time:")]
    return {parts[2].strip() for parts in lines if len(parts) == 3 and parts[2].strip() != "package"}


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=[" ".join(["workbench", *p]) for p in COMMAND_PATHS])
def test_help_imports_no_heavy_module(path):
    """``workbench <command> --help`` answers without torch, numpy, triton, transformers or matplotlib."""
    cmd = [sys.executable, "-X", "importtime", "-m", "workbench", *path, "--help"]
    r = subprocess.run(cmd, cwd=ROOT, env=SRC_ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(" ".join(["usage: workbench", *path])), r.stderr[-2000:]
    imported = _imported(r.stderr)
    assert {"argparse", "workbench.cli", "workbench.cli.upstream"} <= imported  # the report is read right
    assert sorted(m for m in imported if m.split(".")[0] in HEAVY) == []


def test_parsing_a_documented_command_line_imports_no_heavy_module():
    """Every documented ``workbench`` command line that parses does so without torch (and its kin)."""
    argvs = [argv for _, program, argv in COMMANDS if program == "workbench"]
    code = (
        "import contextlib, io, json, sys\n"
        "from workbench.cli import build_parser\n"
        "parsed = 0\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):\n"
        "            build_parser().parse_args(argv)\n"
        "        parsed += 1\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps([parsed, sorted(m for m in sys.modules if m.split('.')[0] in sys.argv[2].split())]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argvs), " ".join(HEAVY)],
        cwd=ROOT,
        env=SRC_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    parsed, heavy = json.loads(r.stdout)
    assert parsed > 20 and heavy == [], (parsed, heavy)


def test_every_option_and_command_has_help():
    options = flags.options(build_parser())
    assert len(options) > 100 and not [o.line() for o in options if not o.help]
    for name, parser in flags.commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert not [f"{name} {a.dest}" for a in action._choices_actions if not a.help]


def test_a_flag_has_one_form_on_every_command():
    assert flags.conflicts(flags.options(build_parser())) == {}


def test_a_flag_in_two_forms_is_found():
    """The check above finds what it looks for: --replay a switch on one command and a file on another."""
    ap = argparse.ArgumentParser(prog="workbench")
    sub = ap.add_subparsers()
    sub.add_parser("a").add_argument("--replay", action="store_true", help="x")
    sub.add_parser("b").add_argument("--replay", type=Path, help="x")
    sub.add_parser("c").add_argument("--sglang", help="x")
    sub.add_parser("d").add_argument("--sglang", nargs="+", help="x")
    assert set(flags.conflicts(flags.options(ap))) == {"--replay"}


def test_expect_takes_the_records_status_words_everywhere():
    expects = {o.command: o for o in flags.options(build_parser()) if "--expect" in o.flags}
    assert set(expects) == {"run", "upstream run"}
    assert {o.takes for o in expects.values()} == {"{crashed,ok,any}"}
    assert {o.default for o in expects.values()} == {"any"}


def test_bare_bench_and_compare_run_the_torch_paths_and_their_help_shows_what_runs(capsys):
    """Triton's kernels run in its interpreter on a CPU (hours): a bare run leaves it out; the help shows the
    settings the comparison resolves, not RunConfig's."""
    from workbench.experiments.definition import COMPARISON, SPEC_KEYS

    for command in ("bench", "compare"):
        args = build_parser().parse_args([command])
        assert args.backends and "triton" not in args.backends
        assert main([command, "--help"]) == 0
        shown = " ".join(capsys.readouterr().out.split())
        resolved = COMPARISON.apply({})
        for key in (*SPEC_KEYS, "max_new_tokens", "max_running"):
            assert f"--{key.replace('_', '-')}" in shown and f"(default: {resolved[key]}, the comparison's" in shown
        assert f"(default: {' '.join(args.backends)}" in shown and f"(default: {COMPARISON.repeats}," in shown
    assert build_parser().parse_args(["compare", "--backends", "triton"]).backends == ["triton"]


def test_the_runtime_lanes_choices_are_the_lanes():
    """cli.upstream writes the real runtime's choices itself (the lane's modules load torch)."""
    from workbench.cli import upstream
    from workbench.upstream.runtime import fixes, release_run

    assert (upstream.BACKENDS, upstream.DP_SIZES, upstream.IDLE_MODES, upstream.ALGORITHMS) == (
        release_run.BACKENDS,
        release_run.DP_SIZES,
        release_run.IDLE_MODES,
        release_run.ALGORITHMS,
    )
    assert upstream.FIXES == tuple(fixes.FIXES)


def test_sweep_hands_its_arguments_to_the_sweep_as_it_declares_them(monkeypatch, capsys):
    """`workbench sweep` once passed its verbosity where the reference backend goes (`invalid backend
    True`): every call of the real signature is bound here and checked, nothing is run."""
    import inspect

    from workbench.experiments import sweep as sweep_module

    declared = inspect.signature(sweep_module.sweep)
    calls = []

    def fake(*args, **kwargs):
        calls.append(declared.bind(*args, **kwargs).arguments)
        return {"findings": ["one finding"]}

    monkeypatch.setattr(sweep_module, "sweep", fake)
    assert main(["sweep", "--backends", "torch_native", "fa3", "--dtypes", "bfloat16", "--settings", "3,1,4"]) == 0
    (bound,) = calls
    assert list(bound["backends"]) == ["torch_native", "fa3"] and list(bound["dtypes"]) == ["bfloat16"]
    assert bound["settings"] == [(3, 1, 4)] and "reference_backend" not in bound  # the default, torch_native
    assert isinstance(bound["verbose"], bool) and "one finding" in capsys.readouterr().out
