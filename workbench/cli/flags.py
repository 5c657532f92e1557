"""Every option of every ``workbench`` command, from the parser itself: ``python -m workbench.cli.flags``
prints one line per option (command, flags, what it takes, default, help), then each flag that commands take
with other values, and each given in two forms (a switch here, a value there), so that a flag that means two
things shows up. tests/cli/test_cli.py walks the same tree: an option without help, or a flag in two forms,
fails it."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from workbench.cli import build_parser


@dataclass(frozen=True)
class Option:
    """One option of one command: its flags (or its name, for a positional) and what it takes."""

    command: str
    flags: tuple[str, ...]
    dest: str
    takes: str
    form: str
    default: object
    help: str | None

    def line(self) -> str:
        """One line: command, flags, what it takes, default, help."""
        default = "" if self.default in (None, False, argparse.SUPPRESS) else f" [default {self.default}]"
        return f"{self.command:<18} {', '.join(self.flags):<48} {self.takes}{default}  {self.help or '(NO HELP)'}"


def _form(action: argparse.Action) -> str:
    """How an option is given, whatever its values: a switch, one value, a list after it, or repeated."""
    if action.nargs == 0:
        return "switch"
    if isinstance(action, argparse._AppendAction):
        return "repeated " + getattr(action.type, "__name__", "str")
    kind = "values" if action.nargs in ("+", "*") else "value"
    return f"{kind} {getattr(action.type, '__name__', 'str')}"


def _takes(action: argparse.Action) -> str:
    """What an option takes: a switch, or its values (choices, type, how many)."""
    if action.nargs == 0:
        return "switch"
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        what = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        what = getattr(action.type, "__name__", None) or "str"
    many = {"+": " ...", "*": " [...]", "?": "?"}.get(action.nargs, "")
    repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return what + many + repeat


def commands(parser: argparse.ArgumentParser, name: str = "workbench") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command, parser) for the parser and every sub-command below it, depth first."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from commands(sub, f"{name} {sub_name}")


def options(parser: argparse.ArgumentParser) -> list[Option]:
    """Every option and positional of every command under ``parser`` (not --help, not the sub-command slots)."""
    found = []
    for command, p in commands(parser):
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            flags = tuple(a.option_strings) or (a.metavar or a.dest,)
            name = command.removeprefix("workbench ")
            found.append(Option(name, flags, a.dest, _takes(a), _form(a), a.default, a.help))
    return found


def disagreements(found: list[Option]) -> dict[str, set[str]]:
    """Each flag that commands take in more than one way (its values, choices or count), for review."""
    forms: dict[str, set[str]] = defaultdict(set)
    for o in found:
        for flag in o.flags:
            if flag.startswith("--"):
                forms[flag].add(o.takes)
    return {flag: takes for flag, takes in forms.items() if len(takes) > 1}


def conflicts(found: list[Option]) -> dict[str, set[str]]:
    """Each flag given in two forms: a switch on one command and a value on another, values of another type,
    or a list after it on one command and repeated on another (one value against several is no conflict)."""
    forms: dict[str, set[str]] = defaultdict(set)
    for o in found:
        for flag in o.flags:
            if flag.startswith("--"):
                forms[flag].add(o.form)
    out = {}
    for flag, f in forms.items():
        kinds = {form.split()[0] for form in f}
        types = {form.split()[-1] for form in f}
        if len(types) > 1 or ("switch" in kinds and len(kinds) > 1) or {"values", "repeated"} <= kinds:
            out[flag] = f
    return out


def main() -> int:
    """Print every option, then the flags taken in more than one form; exit 0."""
    found = options(build_parser())
    for o in found:
        print(o.line())
    for title, table in (
        ("flags taken with other values, choices or counts (review)", disagreements(found)),
        ("flags given in two forms (tests/cli/test_cli.py fails on one)", conflicts(found)),
    ):
        print(f"\n{title}:")
        for flag, takes in sorted(table.items()):
            users = sorted({o.command for o in found if flag in o.flags})
            print(f"  {flag}: {' | '.join(sorted(takes))}  ({', '.join(users)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
