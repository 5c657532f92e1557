"""Import census of a checkout, read with the layering test's own graph code (``tests/import_graph.py``).

    python tests/import_census.py [ROOT]      # default: this checkout

Prints: the internal imports made inside functions (statements, and the files holding them; how
many carry a reason comment), the imports that run up the layers, and the import cycles (strongly
connected components of the module graph, function-level imports included). Module paths from
before the layout moves (``workbench.runner``, ``workbench.display``, ...) are mapped to their new
homes first, so an older commit is counted against the same layers.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_graph import (  # noqa: E402  (the census reads the graph the layering test reads)
    INTERNAL,
    function_level_imports,
    import_cycles,
    import_graph,
    layer_of,
    project_files,
    reason_of,
    runtime_imports,
)

# the layout before the moves (a7a1f05): old module path -> where it lives now
OLD_PATHS = {
    "ci": "workbench_ci",  # installed under project-owned names since the links workbench_ci and workbench_kernels
    "kernels": "workbench_kernels",
    **{f"workbench.{m}": f"workbench.run.{m}" for m in ("config", "api", "runner", "record", "timing")},
    "workbench.dp": "workbench.run.dp",
    **{f"workbench.{m}": f"workbench.experiments.{m}" for m in ("bench", "compare", "sweep", "stats", "contracts")},
    "workbench.revisions": "workbench.speculative.revisions",
    "workbench.forward_mode": "workbench.engine.forward_mode",
    "workbench.metrics": "workbench.engine.metrics",
    "workbench.display": "workbench.views.display",
    "workbench.comparison_report": "workbench.views.comparison",
    "workbench.plots": "workbench.views.plots",
    "workbench.debug.view": "workbench.views.crash_bundle",
    "workbench.upstream.views": "workbench.views.guard_tables",
    "workbench.upstream.plot": "workbench.views.plots.survey_plots",
}


def new_name(module: str) -> str:
    for old in sorted(OLD_PATHS, key=len, reverse=True):
        if module == old or module.startswith(old + "."):
            return OLD_PATHS[old] + module[len(old) :]
    return module


def census(root: Path) -> dict:
    function_level, with_reason, files, upward = [], 0, set(), []
    for path in project_files(root):
        rel = str(path.relative_to(root))
        src = new_name(".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"))
        for node, _, holder, lines in function_level_imports(path, root):
            function_level.append(f"{rel}:{node.lineno}")
            files.add(rel)
            with_reason += reason_of(node, lines, holder) is not None
        for node, target, _ in runtime_imports(path, root, nodes=True):
            if new_name(target).split(".")[0] not in INTERNAL:
                continue
            entry = f"{rel}:{node.lineno} imports {target}"
            if target != "workbench" and layer_of(new_name(target)) > layer_of(src) >= 0 and entry not in upward:
                upward.append(entry)
    cycles = import_cycles(import_graph(root))
    return {
        "function_level": function_level,
        "function_level_files": sorted(files),
        "function_level_with_reason": with_reason,
        "upward": upward,
        "cycles": cycles,
    }


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else Path(__file__).resolve().parent.parent
    c = census(root)
    print(f"census of {root}")
    print(
        f"function-level internal imports: {len(c['function_level'])} statements in "
        f"{len(c['function_level_files'])} files ({c['function_level_with_reason']} with a reason comment)"
    )
    print(f"upward imports: {len(c['upward'])}")
    for u in c["upward"]:
        print("  " + u)
    print(f"import cycles: {len(c['cycles'])}")
    for cyc in c["cycles"]:
        print(f"  {len(cyc)} modules: " + " ".join(sorted(cyc)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
