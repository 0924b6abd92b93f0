"""On-disk memo of a Hub checkpoint's header summary, keyed by commit.

Reading the safetensors headers of a large sharded repository costs one or two HTTP range requests per
shard (163 for DeepSeek-V3). The result depends only on the commit, so it is stored once, next to the
Hugging Face cache, in the "assets" folder huggingface_hub reserves for libraries' derived files
(``$HF_HOME/assets/kv-planner/...``; never inside the hub cache itself, whose layout ``hf cache scan``
checks). Offline runs and later lookups read it instead of the network. Writes are atomic (temporary
file + rename) and best effort: a read-only mount only costs the memo.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from planner.hub.settings import HubSettings
from planner.models.checkpoint import CheckpointInfo

_LOG = logging.getLogger(__name__)

# Bump when the meaning of a stored summary changes; older files are then ignored.
SCHEMA_VERSION = 1
_LIBRARY = "kv-planner"


def summary_path(settings: HubSettings, repo_id: str, commit: str) -> Path:
    folder = "models--" + repo_id.replace("/", "--")
    return settings.assets_dir / _LIBRARY / folder / commit / "checkpoint.json"


def load_summary(settings: HubSettings, repo_id: str, commit: str) -> CheckpointInfo | None:
    """The stored summary for this commit, or None (absent, unreadable or from another schema)."""
    path = summary_path(settings, repo_id, commit)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as error:  # ValueError: bad JSON, UTF-8 or a huge integer
        _LOG.warning("ignoring unreadable checkpoint summary %s: %s", path, error)
        return None
    if not isinstance(document, dict) or document.get("v") != SCHEMA_VERSION:
        return None
    try:
        return CheckpointInfo.model_validate(document.get("checkpoint"))
    except ValidationError as error:
        _LOG.warning("ignoring invalid checkpoint summary %s: %s", path, error)
        return None


def save_summary(settings: HubSettings, repo_id: str, commit: str, info: CheckpointInfo) -> None:
    path = summary_path(settings, repo_id, commit)
    payload = json.dumps({"v": SCHEMA_VERSION, "checkpoint": info.model_dump(mode="json")})
    tmp_name: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".checkpoint.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as error:
        _LOG.info("could not store checkpoint summary %s: %s", path, error)
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
