"""Read sites enumerated syntactically: receivers, guards and aliases on a small source, a file that
does not parse is named (the command exits 2), and the lint's coverage of the attention-backend
sites is counted on the toy release (with a site the lint does not read)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from upstream_fixtures import ATTN_DIR, SPEC_DIR, toy_tree, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.upstream.static.lint import analyse
from workbench.upstream.static.sites import enumerate_sites, file_sites, lint_coverage, summary

SOURCE = textwrap.dedent("""
    class Backend:
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            info = forward_batch.spec_info
            a = spec_info.kv_indptr
            b = getattr(spec_info, "custom_mask", None)
            if hasattr(info, "positions"):
                c = info.positions
            d = info.topk
            e = forward_batch.seq_lens_cpu.max()
            def inner(batch):
                return batch.extend_prefix_lens.shape
            return other.kv_indices
""")


def _by_attr(sites: list[dict]) -> dict[str, dict]:
    return {s["attr"]: s for s in sites}


def test_receivers_guards_and_aliases_are_found_without_the_lint() -> None:
    sites = _by_attr(file_sites("x.py", SOURCE))
    assert sites["kv_indptr"]["receiver"] == "spec_info" and sites["kv_indptr"]["guard"] is None
    assert sites["custom_mask"]["guard"] == "getattr"
    assert sites["positions"]["guard"] == "hasattr" and sites["positions"]["receiver"] == "spec_info"
    assert sites["topk"]["receiver"] == "spec_info" and sites["topk"]["guard"] is None
    assert sites["seq_lens_cpu"]["receiver"] == "forward_batch"
    assert sites["spec_info"]["receiver"] == "forward_batch"
    assert sites["extend_prefix_lens"]["function"] == "Backend.init_forward_metadata.inner"
    assert sites["kv_indptr"]["function"] == "Backend.init_forward_metadata"
    assert "kv_indices" not in sites  # `other` is neither a spec input nor a batch


def test_a_file_that_does_not_parse_is_named() -> None:
    tree = toy_tree(True).with_changes({f"{SPEC_DIR}broken.py": "def f(:\n"})
    res = enumerate_sites(tree)
    assert res["unparsed"] and res["unparsed"][0].startswith(f"{SPEC_DIR}broken.py")


def test_lint_coverage_counts_the_backend_sites_the_lint_reads() -> None:
    tree = toy_tree(True)
    backend = f"{ATTN_DIR}toy_backend.py"
    extra = tree.files[backend] + "\n\ndef graph_only(forward_batch):\n    return forward_batch.spec_info.kv_last\n"
    tree = tree.with_changes({backend: extra})
    res = enumerate_sites(tree)
    cov = lint_coverage(res, analyse(tree, paths=False))
    assert cov["sites"] >= 2 and 0 < cov["in_lint"] < cov["sites"]
    assert any(u.endswith("graph_only kv_last") for u in cov["not_in_lint"])
    assert sum(summary(res).values()) == len(res["sites"])


def test_the_command_writes_the_sites_of_a_release(tmp_path: Path) -> None:
    cache = write_fake_cache(tmp_path, {"0.5.14": dict(toy_tree(True).files)})
    out = tmp_path / "sites.json"
    argv = ["upstream", "--cache-dir", str(cache), "sites", "--sglang", "0.5.14", "--json", str(out)]
    assert workbench_main(argv) == 0
    rel = json.loads(out.read_text())["releases"]["0.5.14"]
    assert rel["sites"] and rel["lint_coverage"]["sites"] >= 1
    assert workbench_main([*argv[:-3], "0.5.99"]) == 2
    broken = {**toy_tree(True).files, f"{SPEC_DIR}broken.py": "def f(:\n"}
    cache = write_fake_cache(tmp_path / "broken", {"0.5.14": broken})
    assert workbench_main(["upstream", "--cache-dir", str(cache), "sites", "--sglang", "0.5.14"]) == 2
