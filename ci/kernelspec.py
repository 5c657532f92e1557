"""The Jupyter kernel the notebooks run on: ``eagle-workbench``, bound to the project's interpreter.

The notebooks' own metadata names the generic ``python3`` kernel so they open anywhere; the runner
and the tests pass this name to papermill explicitly, because a user-level ``python3`` kernelspec
(preferred by Jupyter over the venv's) could point at an interpreter without the workbench.
``make venv`` installs it into the venv's own share dir (``ipykernel install --sys-prefix``).
"""

from __future__ import annotations

import os
import sys

KERNEL_NAME = "eagle-workbench"
INSTALL = f"{{python}} -m ipykernel install --sys-prefix --name {KERNEL_NAME} --display-name 'Python 3 ({KERNEL_NAME})'"


class KernelSpecError(RuntimeError):
    """The eagle-workbench kernelspec is missing or runs another interpreter."""


def kernel_name() -> str:
    """``eagle-workbench`` after checking that its kernelspec runs this interpreter (``sys.executable``)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    try:
        spec = ksm.get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        raise KernelSpecError(
            f"kernelspec {KERNEL_NAME!r} not found (installed: {sorted(ksm.find_kernel_specs())}); "
            f"install it with `make venv` or `{INSTALL.format(python=sys.executable)}`"
        ) from None
    exe = spec.argv[0] if spec.argv else ""
    if os.path.dirname(os.path.abspath(exe)) != os.path.dirname(os.path.abspath(sys.executable)):
        raise KernelSpecError(
            f"kernelspec {KERNEL_NAME!r} at {spec.resource_dir} runs {exe!r}, not this interpreter "
            f"{sys.executable!r}; reinstall it with `{INSTALL.format(python=sys.executable)}`"
        )
    return KERNEL_NAME
