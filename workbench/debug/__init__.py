"""Debugging a crash where it happens: crash bundles (``bundle``, ``load``),
in-process replay (``replay``), notebook views (``view``) and ``workbench debug`` (``cli``)."""
