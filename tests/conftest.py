"""Shared fixtures. Tests marked ``network`` need the package registries and a large install;
they run only with WB_NETWORK_TESTS=1 (the nightly sets it) and say so when skipped."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    import kernels

    kernels.setup()  # the session's entry point chooses where the Triton kernels run


def pytest_collection_modifyitems(config, items):
    if os.environ.get("WB_NETWORK_TESTS") == "1":
        return
    skip = pytest.mark.skip(
        reason="network test: needs the package registries and a large install; "
        "set WB_NETWORK_TESTS=1 to run it (the nightly does)"
    )
    for item in items:
        if "network" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def prompts():
    from workbench.models.loader import load_prompts

    return load_prompts()


@pytest.fixture(scope="session", autouse=True)
def _bundles_in_pytest_tmp(tmp_path_factory):
    """Crash bundles the tests provoke go under pytest's own tmp folder, not the user's cache."""
    old = os.environ.get("WB_BUNDLE_DIR")
    os.environ["WB_BUNDLE_DIR"] = str(tmp_path_factory.mktemp("crash-bundles"))
    yield
    if old is None:
        os.environ.pop("WB_BUNDLE_DIR", None)
    else:
        os.environ["WB_BUNDLE_DIR"] = old
