"""Replays of real SGLang code on CPU: one driver (``wb_driver``, run inside a release's replay
environment), one front end (``front.replay``: a release, a checkout or edited tree, a crash
bundle's batch), and what is built on it: a verdict for every lint finding (``verdicts``), the
seed crash's run record (``records``), a crash bundle's replay (``bundles``)."""

from .front import replay
from .verdicts import verdicts

__all__ = ["replay", "verdicts"]
