"""A guard probe, for testing the shim guard only (``workbench upstream run --extra-shim``): it hides
the seed's crash by setting ``EagleDraftExtendInput.kv_indptr = None`` as a class attribute, from
outside the release, the change PR #28221 makes as a field. On the between-PRs checkout of 0.5.14
with ``--fix verify-input`` the run would complete ok; the shim guard must end it with status error,
naming ``EagleDraftExtendInput.kv_indptr``. Not a shim of the real runtime: never installed otherwise."""


def install() -> None:
    """Set the attribute on the release's class, in the rank process."""
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    EagleDraftExtendInput.kv_indptr = None
