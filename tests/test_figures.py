"""``docs/figures.md`` is what ``python scripts/figures.py`` writes from the shipped assets (no figure
in it typed by hand), its ``--check`` fails on a stale file, and the README and docs/ point to it."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wb_figures_script", ROOT / "scripts" / "figures.py")
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)


def test_the_committed_figures_are_what_the_command_writes():
    assert (ROOT / "docs" / "figures.md").read_text() == figures.render(), "run: python scripts/figures.py"
    readme = (ROOT / "README.md").read_text()
    assert figures.readme(readme) == readme, "run: python scripts/figures.py"
    assert "| `make report` |" in readme.split(figures.BEGIN, 1)[1].split(figures.END, 1)[0]


def test_check_exits_1_on_a_stale_file_and_0_on_a_fresh_one(tmp_path, monkeypatch, capsys):
    out, readme = tmp_path / "figures.md", tmp_path / "README.md"
    monkeypatch.setattr(figures, "OUT", out)
    monkeypatch.setattr(figures, "README", readme)
    out.write_text(figures.render())
    readme.write_text(f"# x\n{figures.BEGIN} note -->\n| `make test` | typed by hand | 1 s |\n{figures.END}\nrest\n")
    assert figures.main(["--check"]) == 1
    assert "README.md differ(s): run python scripts/figures.py" in capsys.readouterr().out
    assert figures.main([]) == 0 and figures.main(["--check"]) == 0
    assert "typed by hand" not in readme.read_text() and readme.read_text().endswith("\nrest\n")
    readme.write_text("# no markers\n")
    with pytest.raises(ValueError, match="lacks the quick-start markers"):
        figures.main(["--check"])


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
    for doc in ("upstream-guard.md", "real-runtime.md", "guide.md"):
        assert "figures.md" in (ROOT / "docs" / doc).read_text(), doc


def test_every_link_into_the_figures_lands_on_a_generated_anchor():
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', figures.render()))
    links = {
        (path.name, anchor)
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for anchor in re.findall(r"figures\.md#([\w.-]+)", path.read_text())
    }
    assert {"bench", "oracle-recall", "runtime-runs-0.5.14", "runtime-runs-0.5.23"} <= {a for _, a in links}
    assert [(doc, a) for doc, a in sorted(links) if a not in anchors] == []


def test_the_bench_runtime_and_oracle_tables_follow_their_assets(tmp_path, monkeypatch):
    fake = tmp_path / "assets"
    fake.mkdir()
    bench = json.loads((figures.ASSETS / "bench.json").read_text())
    bench["rows"][0]["speedup"].update(median=1.5, ci=[1.25, 1.75])
    bench["rows"][0]["eagle_round_ms"].update({"draft": 1.0, "verify": 2.0, "draft-extend": 0.5, "round": 3.5})
    (fake / "bench.json").write_text(json.dumps(bench))
    runs = json.loads((figures.ASSETS / "runtime_runs.json").read_text())
    key = next(k for k, r in runs["runs"].items() if r["status"] == "crashed")
    runs["runs"][key]["crash"]["raised_at"]["line"] = 4242
    (fake / "runtime_runs.json").write_text(json.dumps(runs))
    oracle = json.loads((figures.ASSETS / "upstream_oracle_recall.json").read_text())
    run = oracle["runs"][0] if "runs" in oracle else oracle
    release = next(iter(run["releases"].values()))
    kind = next(iter(release["kinds"]))
    release["kinds"][kind].update(confirmed=4, reported=2, recall=0.5, confirmed_at_site=3, recall_at_site=1 / 3)
    release["kinds"][kind]["at_site_unknown"] = 1
    (fake / "upstream_oracle_recall.json").write_text(json.dumps(oracle))
    monkeypatch.setattr(figures, "ASSETS", fake)
    assert "| 1.50 [1.25, 1.75] (" in "\n".join(figures.bench())
    assert "1.00 + 2.00 + 0.50 = 3.50" in "\n".join(figures.bench())
    assert ":4242`" in "\n".join(figures.runtime_runs())
    assert f"| `{kind}` |" in "\n".join(figures.oracle_recall())
    assert "| 0.500 (2 of 4) |" in "\n".join(figures.oracle_recall())
    assert "| 3: 0.333 (1 of 3) (1 not judged) |" in "\n".join(figures.oracle_recall())


def test_the_corpus_sites_family_and_coverage_tables_follow_their_assets(tmp_path, monkeypatch):
    fake = tmp_path / "assets"
    fake.mkdir()
    corpus = json.loads((figures.ASSETS / "upstream_corpus.json").read_text())
    for case in corpus["cases"][:2]:
        case.pop("verdict", None), case.pop("outcome", None)
    corpus["cases"][0]["verdict"] = "missed"
    corpus["cases"][1]["outcome"] = "missed"  # a file written before `verdict` reads the same
    corpus["figures"]["held_out"].update(found_by_family=3, family_recall=0.429)
    sites = json.loads((figures.ASSETS / "upstream_sites.json").read_text())
    release = next(iter(sites["releases"].values()))
    release["lint_coverage"].update(
        sites=10, in_lint=7, share=0.7, not_in_lint=["a.py:1 capture_graph x", "a.py:2 f y"]
    )
    family = json.loads((figures.ASSETS / "upstream_family.json").read_text())
    found = next(iter(family["releases"].values()))["findings"]
    found[:] = [{**found[0], "kind": "none-deref", "verdict": "confirmed"}]
    coverage = json.loads((figures.ASSETS / "interval_coverage.json").read_text())
    coverage["rows"][0].update(exact=0.5, simulated=0.25)
    for name, doc in [
        ("upstream_corpus.json", corpus),
        ("upstream_sites.json", sites),
        ("upstream_family.json", family),
        ("interval_coverage.json", coverage),
    ]:
        (fake / name).write_text(json.dumps(doc))
    monkeypatch.setattr(figures, "ASSETS", fake)
    text = "\n".join(figures.corpus_results())
    assert f"| {corpus['cases'][0]['split']} |" in text and text.count("| missed |") == 2
    assert "0 + 3 by the family analysis" in text and "(family recall 0.429)" in text
    assert "| 7 of 10 (0.700) | 1 of 2 |" in "\n".join(figures.read_sites())
    assert "| 1: 1 confirmed | 0 | 0 |" in "\n".join(figures.family())
    assert "| 50.0 / 25.0 % |" in "\n".join(figures.interval_coverage())


def test_the_explore_cells_are_grouped_by_verdict_and_reason(tmp_path, monkeypatch):
    fake = tmp_path / "assets"
    fake.mkdir()
    explore = json.loads((figures.ASSETS / "runtime_explore.json").read_text())
    crashed = [c for c in explore["cells"] if c.get("verdict", c.get("outcome")) == "crashed"]
    for c in crashed:
        c.update(reason="E: the same at x.py:1", known=False)
    (fake / "runtime_explore.json").write_text(json.dumps(explore))
    monkeypatch.setattr(figures, "ASSETS", fake)
    rows = [r for r in figures.explore_summary() if r.startswith("| crashed |")]
    assert len(rows) == 1 and rows[0].startswith(f"| crashed | {len(crashed)} |")
    assert rows[0].endswith("| **NEW**: E: the same at x.py:1 |")
    counted = sum(int(r.split(" | ")[1]) for r in figures.explore_summary() if r.startswith("| ") and r[2:4] != "ve")
    assert counted == len(explore["cells"])
    assert figures._limit_reason("as A/b/dp2/start/overlap-off (set-up error: V (x.py:3)); the idle mode") == (
        "set-up error: V (x.py:3)"
    )


def test_make_assets_time_counts_each_command_set_once_and_no_curated_entry(tmp_path, monkeypatch):
    fake = tmp_path / "assets"
    fake.mkdir()
    entry = {"commands": ["python scripts/train_models.py"], "kind": "measurement", "minutes": 120}
    cat = [
        {**entry, "path": "models"},
        {**entry, "path": "prompts.json"},
        {"path": "b.json", "commands": ["workbench bench"], "kind": "measurement", "minutes": 60},
        {"path": "c.json", "commands": ["workbench upstream corpus"], "kind": "curated", "minutes": 600},
    ]
    (fake / "catalogue.json").write_text(json.dumps({"assets": cat}))
    (fake / "command_times.json").write_text(json.dumps({"times": {}}))
    monkeypatch.setattr(figures, "ASSETS", fake)
    assert figures._time_of("make assets").startswith("hours: about 3 h by the catalogue's estimates")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"wb_{name}_script", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_report_picture_needs_a_report_and_says_so(tmp_path, capsys):
    shot = _script("screenshot_report")
    assert shot.main(["--report", str(tmp_path / "none.html"), "--out", str(tmp_path / "r.png")]) == 2
    assert "run `make report` first" in capsys.readouterr().err
    png = ROOT / "docs" / "images" / "report.png"
    assert (
        png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(docs/images/report.png)" in (ROOT / "README.md").read_text()
    )


def test_timed_commands_run_the_make_target_without_rebuilding_the_venv(tmp_path):
    times = _script("time_commands")
    venv = tmp_path / "venv"
    assert times.argv_of("make report", venv) == (
        ["make", "-o", str(venv / ".installed"), f"VENV={venv}", "report"],
        {},
    )
    assert times.argv_of("make venv", venv) == (["make", f"VENV={venv}", "venv"], {})
    assert times.argv_of("CI=true bash .ci/run", venv) == (["bash", ".ci/run"], {"CI": "true"})
    assert times.argv_of("workbench --help", venv) == ([str(venv / "bin" / "workbench"), "--help"], {})
    with pytest.raises(SystemExit):
        times.main(["make nothing"])


def test_timed_commands_leave_the_tree_as_committed_until_the_last_has_run(tmp_path, monkeypatch):
    """`make test` timed after `make report` checks the shipped times against docs/figures.md: the file is
    written once, after the last command, so every command runs on the committed tree."""
    times = _script("time_commands")
    out = tmp_path / "command_times.json"
    out.write_text(json.dumps({"times": {}}) + "\n")
    before = out.read_text()
    seen = []

    def fake_time_one(name, venv):
        seen.append(out.read_text() == before)
        return {"command": name, "wall_s": 1.0, "exit": 0}

    monkeypatch.setattr(times, "OUT", out)
    monkeypatch.setattr(times, "_git", lambda *a: "")
    monkeypatch.setattr(times, "time_one", fake_time_one)
    assert times.main(["make report", "make test"]) == 0
    assert seen == [True, True]
    assert set(json.loads(out.read_text())["times"]) == {"make report", "make test"}
