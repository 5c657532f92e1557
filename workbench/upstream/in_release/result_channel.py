"""The one result channel out of a release's interpreter: a JSON file at the config's ``result_path``."""

import json
import os


def write(path: str, obj: dict) -> None:
    """Write ``obj`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, default=str)
    os.replace(tmp, path)
