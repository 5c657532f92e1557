"""The shipped measurements and models under ``workbench/assets``, by their catalogue
(``workbench/assets/catalogue.json``): check it, or regenerate what it lists.

    python scripts/assets.py check                 # exit 0 when every check holds, 1 otherwise
    python scripts/assets.py regenerate [--net 0|1] [--groups G ...] [--only PATH ...] [--max-minutes M] [--dry-run]

``check``: every file under ``workbench/assets`` is covered by an entry; every entry's path exists;
each command parses (the command's own argument parser runs on it, the command does not); each
commit is in this repository's history; where the asset records its commit, that record and the
catalogue agree. ``regenerate`` runs the commands of the measurements and models (curated entries
have none that writes them) in catalogue order from a clean tree, each run once however many entries it
writes, with ``OUT`` a scratch folder whose ``collect`` files are copied into place, and goes on past a
failure. It prints one line per asset: regenerated (with its commit), FAILED, or skipped and why (not
asked for by ``--groups``/``--only``, curated, needs the network under ``--net 0``, longer than
``--max-minutes``), then the counts; it writes each regenerated entry's commit into the catalogue (the
commit the asset records, else the commit the run started at). Exit codes: 0 done (every command it
ran ended 0), 1 a check or a command failed (named on stderr), 2 a usage error (an unknown group or
path, uncommitted code outside workbench/assets).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "workbench" / "assets"
CATALOGUE = ASSETS / "catalogue.json"
KINDS = ("measurement", "model", "curated")
HEX = re.compile(r"^[0-9a-f]{7,40}")


def load_catalogue(path: Path = CATALOGUE) -> list[dict]:
    """The catalogue's entries, each checked for the fields every entry has."""
    entries = json.loads(path.read_text())["assets"]
    for e in entries:
        missing = {"path", "kind", "commands", "commit", "recorded", "network", "minutes", "group"} - set(e)
        if missing:
            raise ValueError(f"catalogue entry {e.get('path')!r} lacks {sorted(missing)}")
        if e["kind"] not in KINDS:
            raise ValueError(f"catalogue entry {e['path']!r}: kind {e['kind']!r}; valid: {', '.join(KINDS)}")
    return entries


def groups(entries: list[dict]) -> list[str]:
    """The groups in catalogue order."""
    return list(dict.fromkeys(e["group"] for e in entries))


def uncovered(entries: list[dict], assets: Path = ASSETS) -> list[str]:
    """Files under `assets` that no entry covers (the catalogue itself excepted)."""
    covered = [assets / e["path"] for e in entries]
    out = []
    for f in sorted(p for p in assets.rglob("*") if p.is_file()):
        if f.name == CATALOGUE.name and f.parent == assets or "__pycache__" in f.parts:
            continue
        if not any(f == c or c in f.parents for c in covered):
            out.append(str(f.relative_to(assets)))
    return out


class _Parsed(Exception):
    """Raised by the patched parser once the command's arguments are parsed: nothing runs after it."""


def _argv(command: str, out: str) -> tuple[list[str], dict[str, str]]:
    """(argv, environment variables) of a catalogue command, OUT replaced by `out`."""
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    words = [re.sub(r"^OUT(?=/|$)", out, w) for w in words]
    if words[:1] == ["workbench"]:
        return [sys.executable, "-m", "workbench", *words[1:]], env
    if words[:1] == ["python"]:
        return [sys.executable, *words[1:]], env
    raise ValueError(f"command {command!r}: the program must be `workbench` or `python`")


def parse_command(command: str) -> str | None:
    """None when the command's own argument parser accepts it (the command does not run), else why
    not. Runs the program in this process with ``ArgumentParser.parse_args`` stopping after parsing."""
    argv, _ = _argv(command, "/nonexistent-scratch")
    args = argv[1:]
    original = argparse.ArgumentParser.parse_args

    def stop(self: argparse.ArgumentParser, *a, **k) -> argparse.Namespace:
        raise _Parsed(original(self, *a, **k))

    saved_argv, err = sys.argv, io.StringIO()
    argparse.ArgumentParser.parse_args = stop  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if args[0] == "-m":
                sys.argv = [args[1], *args[2:]]
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(args)
                runpy.run_path(str(ROOT / args[0]), run_name="__main__")
    except _Parsed:
        return None
    except SystemExit as exc:
        return f"exit {exc.code}: {err.getvalue().strip()[-500:]}"
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv = saved_argv
    return "the program returned without parsing its arguments"


def in_history(commit: str) -> bool:
    """Is `commit` a commit of this repository's history (an ancestor of HEAD)?"""
    ok = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    if ok.returncode:
        return False
    anc = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", commit, "HEAD"], capture_output=True)
    return anc.returncode == 0


def _field(doc: object, path: list[str]) -> list[object]:
    if not path:
        return [doc]
    head, rest = path[0], path[1:]
    if head == "*":
        items = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else []
        return [v for item in items for v in _field(item, rest)]
    if isinstance(doc, dict) and head in doc:
        return _field(doc[head], rest)
    return []


def recorded_commits(entry: dict, assets: Path = ASSETS) -> dict[str, list[str]]:
    """{spec: the commits the asset records there (hex, 7 characters)} for each `recorded` spec."""
    out = {}
    for spec in entry["recorded"]:
        file, _, field = spec.rpartition(":")
        base = assets / entry["path"]
        files = sorted(base.glob(file)) if file else [base]
        values = [v for f in files for v in _field(json.loads(f.read_text()), field.split("."))]
        found = [HEX.match(str(v)) for v in values]
        out[spec] = [m.group(0)[:7] for m in found if m] + [
            f"unreadable: {v!r}" for v, m in zip(values, found, strict=True) if not m
        ]
    return out


def check(entries: list[dict], assets: Path = ASSETS) -> list[str]:
    """Every problem of the catalogue, one line each (empty: it holds)."""
    problems = [f"{f}: not in the catalogue" for f in uncovered(entries, assets)]
    for e in entries:
        name = e["path"]
        if not (assets / name).exists():
            problems.append(f"{name}: catalogued but missing")
            continue
        if e["kind"] != "curated" and not e["commands"]:
            problems.append(f"{name}: a {e['kind']} needs the command that regenerates it")
        if e["kind"] == "curated" and not e.get("made_by"):
            problems.append(f"{name}: a curated asset needs `made_by`")
        for command in e["commands"]:
            why = parse_command(command)
            if why:
                problems.append(f"{name}: command does not parse: {command}: {why}")
        if not e["commit"]:
            problems.append(f"{name}: no commit")
        problems += [f"{name}: commit {c} is not in this history" for c in e["commit"] if not in_history(c)]
        recorded = recorded_commits(e, assets)
        problems += [f"{name}: records no commit at {spec}" for spec, got in recorded.items() if not got]
        seen = {c for got in recorded.values() for c in got}
        if recorded and seen != {c[:7] for c in e["commit"]}:
            problems.append(f"{name}: records {sorted(seen)}, the catalogue says {e['commit']}")
    return problems


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _dirty() -> str:
    """Tracked code that differs from HEAD; the assets being rewritten do not count (as in
    ``workbench.run.provenance.workbench_commit``), so one regeneration can follow another."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!workbench/assets"],
        capture_output=True,
        text=True,
    ).stdout.strip()


def regenerate(
    entries: list[dict],
    net: bool,
    chosen: list[str],
    dry_run: bool = False,
    only: list[str] | None = None,
    max_minutes: float | None = None,
    assets: Path = ASSETS,
    catalogue: Path = CATALOGUE,
) -> int:
    """Runs the commands of the chosen measurements and models in catalogue order, going on past a
    failure; prints one line per asset (regenerated, failed, or skipped and why) and a count. Writes
    each regenerated entry's commit into `catalogue`. 0 when every command it ran ended 0, else 1."""
    head = _head()
    ran: dict[str, bool] = {}  # the commands of a run -> whether it succeeded (one run writes several entries)
    counts = {"regenerated": 0, "skipped": 0, "failed": 0}

    def say(path: str, what: str, count: str, stream=sys.stdout) -> None:
        counts[count] += 1
        print(f"[assets] {path}: {what}", file=stream, flush=True)

    for e in entries:
        name = e["path"]
        if e["group"] not in chosen or (only is not None and name not in only):
            say(name, "skipped: not asked for (--groups/--only)", "skipped")
            continue
        if e["kind"] == "curated":
            say(name, "skipped: curated, no command writes it", "skipped")
            continue
        if e["network"] and not net:
            say(name, "skipped: needs the network (--net 0)", "skipped")
            continue
        if max_minutes is not None and e["minutes"] > max_minutes:
            say(name, f"skipped: too long, about {e['minutes']} min (--max-minutes {max_minutes:g})", "skipped")
            continue
        key = "\n".join(e["commands"])
        if key not in ran:
            print(f"[assets] {name}: {'would run' if dry_run else 'running'}, about {e['minutes']} min", flush=True)
            ran[key] = _run_entry(e, assets, dry_run)
        if not ran[key]:
            say(name, "FAILED (its command above)", "failed", sys.stderr)
            continue
        if dry_run:
            say(name, "would be regenerated (--dry-run)", "regenerated")
            continue
        got = sorted({c for cs in recorded_commits(e, assets).values() for c in cs})
        e["commit"] = got or [head]
        say(name, f"regenerated at {', '.join(e['commit'])}", "regenerated")
    if not dry_run and counts["regenerated"]:
        doc = json.loads(catalogue.read_text())
        by_path = {e["path"]: e["commit"] for e in entries}
        for e in doc["assets"]:
            e["commit"] = by_path.get(e["path"], e["commit"])
        catalogue.write_text(json.dumps(doc, indent=1) + "\n")
    tail = " (--dry-run: nothing ran)" if dry_run else ""
    print("[assets] " + ", ".join(f"{v} {k}" for k, v in counts.items()) + tail, flush=True)
    return 1 if counts["failed"] else 0


def _run_entry(e: dict, assets: Path, dry_run: bool) -> bool:
    """Runs one entry's commands in order (``OUT`` a scratch folder, its ``collect`` files copied into
    `assets`); False at the first that fails, naming it and its exit status on stderr."""
    scratch = tempfile.mkdtemp(prefix="wb-assets-")
    try:
        for command in e["commands"]:
            argv, env = _argv(command, scratch)
            print(f"[assets]   {command}", flush=True)
            if dry_run:
                continue
            rc = subprocess.run(argv, cwd=ROOT, env={**os.environ, **e.get("env", {}), **env}).returncode
            if rc:
                print(f"[assets] {e['path']}: exit {rc}: {command}", file=sys.stderr, flush=True)
                return False
        for src, dst in e.get("collect", {}).items():
            if not dry_run:
                shutil.copyfile(Path(scratch) / src, assets / dst)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="what", required=True)
    ck = sub.add_parser("check", help="check the catalogue against the files, the parsers and the history")
    ck.add_argument("--assets", type=Path, default=ASSETS, help="the assets folder, holding its catalogue.json")
    rg = sub.add_parser("regenerate", help="run the catalogued commands (from a clean tree)")
    rg.add_argument(
        "--net", type=int, choices=(0, 1), default=1, help="1 (default): also the entries needing the network"
    )
    rg.add_argument("--groups", nargs="+", default=None, metavar="G", help="only these groups (default: every group)")
    rg.add_argument(
        "--only", nargs="+", default=None, metavar="PATH", help="only these catalogue paths (within --groups)"
    )
    rg.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        metavar="M",
        help="skip the entries whose catalogued `minutes` exceed M (default: no limit)",
    )
    rg.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    args = ap.parse_args(argv)
    if args.what == "check":
        entries = load_catalogue(args.assets / CATALOGUE.name)
        problems = check(entries, args.assets)
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{len(entries)} catalogued assets, {len(problems)} problem(s)")
        return 1 if problems else 0
    entries = load_catalogue()
    known = groups(entries)
    chosen = args.groups or known
    bad = [g for g in chosen if g not in known]
    if bad:
        print(f"unknown group(s) {', '.join(bad)}; valid: {', '.join(known)}", file=sys.stderr)
        return 2
    paths = [e["path"] for e in entries]
    bad = [p for p in args.only or [] if p not in paths]
    if bad:
        print(f"unknown path(s) {', '.join(bad)}; valid: {', '.join(paths)}", file=sys.stderr)
        return 2
    if _dirty() and not args.dry_run:
        print(
            "the tree has uncommitted code changes: commit first, each asset records the commit it ran at",
            file=sys.stderr,
        )
        return 2
    return regenerate(entries, bool(args.net), chosen, args.dry_run, args.only, args.max_minutes)


if __name__ == "__main__":
    from workbench.run.supervisor import exits_on_sigterm

    sys.exit(exits_on_sigterm("scripts/assets.py", main))
