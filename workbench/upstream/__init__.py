"""The upstream part of the workbench, on real sglang releases from PyPI.

- `survey(versions, cache_dir)`: a static (ast-only) contract survey of the release wheels:
  which spec-input classes declare `kv_indptr`, which attention backends read
  `spec_info.kv_indptr` and how, which workers install which class on draft-extend.
- `replay(version, cache_dir)`: the padded-IDLE draft-extend pass on the release's real
  code (real pools, real ForwardBatch padding, real TritonAttnBackend), in an isolated
  cached venv, on CPU with the Triton interpreter; returns a run record.
"""

from .contract_survey import format_details, format_table, survey
from .release_replay import replay
from .releases import ReleaseError, default_cache_dir, default_versions, known_releases

__all__ = [
    "survey",
    "replay",
    "format_table",
    "format_details",
    "known_releases",
    "default_versions",
    "default_cache_dir",
    "ReleaseError",
]
