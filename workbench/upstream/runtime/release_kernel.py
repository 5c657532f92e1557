"""An IPython kernel in a release's environment, set up as the real runtime's ranks are.

The kernelspec ``workbench upstream kernel --sglang V`` registers runs this module with the release's
dependency venv through ``release_process``'s boot (target ``runtime.release_kernel``; the release's
or a checkout's sources first on ``sys.path``; no workbench import before the set-up): it puts the
workbench's folder last on ``sys.path``, applies the CPU shims the ranks apply
(``in_release.shims.apply``; settings come from the kernelspec's
environment) and the device equivalences the ranks install (``equivalences.apply``) once ipykernel
has bound its sockets, records them in ``CODE_STATE`` (this module is
importable as ``release_kernel``), then runs the kernel. Fixes are not applied here: a replay
applies the fixes its bundle names.

Environment: ``WB_SGLANG_VERSION``, ``WB_SGLANG_SRC`` (the folder holding ``sglang/``),
``WB_WORKBENCH_ROOT`` (the folder holding ``workbench/``).
"""

import os
import sys

from ..in_release import shims
from . import equivalences

CODE_STATE: dict = {}


def setup() -> dict:
    """The workbench's folder, shims and device equivalences (module docstring); returns ``CODE_STATE``."""
    version, src = os.environ["WB_SGLANG_VERSION"], os.environ["WB_SGLANG_SRC"]
    root = os.environ.get("WB_WORKBENCH_ROOT")
    if root and root not in sys.path:
        sys.path.append(root)
    applied = shims.apply(version)
    equivalent = equivalences.apply(version)
    CODE_STATE.update(
        version=version,
        src_root=src,
        shims=[s["name"] for s in applied if s["installed"]],
        shim_records=applied,
        equivalences=[e["name"] for e in equivalent if e["installed"]],
        equivalence_records=equivalent,
    )
    return CODE_STATE


def main() -> None:
    """ipykernel's app bound to its ports first (the ports Jupyter chose; importing sglang first opened
    others and raced them), then the set-up, then the kernel's loop."""
    sys.modules.setdefault("release_kernel", sys.modules[__name__])
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize()
    setup()
    app.start()
