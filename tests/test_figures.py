"""``docs/figures.md`` is what ``python scripts/figures.py`` writes from the shipped assets (no figure
in it typed by hand), its ``--check`` fails on a stale file, and the README and docs/ point to it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wb_figures_script", ROOT / "scripts" / "figures.py")
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)


def test_the_committed_figures_are_what_the_command_writes():
    assert (ROOT / "docs" / "figures.md").read_text() == figures.render(), "run: python scripts/figures.py"


def test_check_exits_1_on_a_stale_file_and_0_on_a_fresh_one(tmp_path, monkeypatch, capsys):
    out = tmp_path / "figures.md"
    monkeypatch.setattr(figures, "OUT", out)
    out.write_text("# Figures\n\ntyped by hand: 2.0x\n")
    assert figures.main(["--check"]) == 1
    assert "differs: run python scripts/figures.py" in capsys.readouterr().out
    out.write_text(figures.render())
    assert figures.main(["--check"]) == 0


def test_every_section_names_its_catalogued_asset_and_the_figures_follow_the_asset(tmp_path, monkeypatch):
    text = figures.render()
    for anchor, _title, path, _section in figures.SECTIONS:
        assert f'<a id="{anchor}"></a>' in text and f"From `workbench/assets/{path}` (commit " in text
    # a changed measurement changes the page: the replay table reads the shipped record
    fake = tmp_path / "assets"
    fake.mkdir()
    recs = json.loads((figures.ASSETS / "upstream_replays.json").read_text())
    recs[2]["metrics"]["kv_indptr"] = [0, 7, 9]
    (fake / "upstream_replays.json").write_text(json.dumps(recs))
    monkeypatch.setattr(figures, "ASSETS", fake)
    assert "| 0.5.14 | ok | – | – | [0, 7, 9] |" in "\n".join(figures.replays())


def test_readme_and_docs_point_to_the_generated_figures():
    assert "docs/figures.md" in (ROOT / "README.md").read_text()
    for doc in ("upstream-guard.md", "real-runtime.md"):
        assert "figures.md" in (ROOT / "docs" / doc).read_text(), doc
