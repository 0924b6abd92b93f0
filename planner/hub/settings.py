"""Where and how to reach the Hugging Face Hub, read from the environment at each call.

``huggingface_hub`` reads ``HF_ENDPOINT``, ``HF_HUB_CACHE``/``HF_HOME`` and ``HF_HUB_OFFLINE`` once,
when it is first imported (``huggingface_hub/constants.py``). A webhook or test that changes them later
would be ignored, so kv-planner reads them per call and passes them explicitly (``endpoint=``,
``cache_dir=``, ``local_files_only=``). The fallbacks are the library's own, so the cache is the one
``huggingface-cli`` and vLLM pods use (``HF_HOME=/root/.cache/huggingface`` mounted from a volume).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
# Per-request timeout, as huggingface_hub's own default (constants.DEFAULT_REQUEST_TIMEOUT = 10).
DEFAULT_REQUEST_TIMEOUT = 10.0

_TRUE = {"1", "ON", "YES", "TRUE"}


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().upper() in _TRUE


def _expand(value: str) -> Path:
    return Path(os.path.expandvars(value)).expanduser()


@dataclass(frozen=True)
class HubSettings:
    """The Hub endpoint, cache folders, token and offline switch for one resolution."""

    endpoint: str
    cache_dir: Path  # the hub cache: models--org--name/{blobs,refs,snapshots}
    assets_dir: Path  # huggingface_hub's "assets" cache, where libraries keep derived files
    token: str | None  # None: let huggingface_hub use its saved login (HF_TOKEN, `hf auth login`)
    offline: bool
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT

    @classmethod
    def from_env(
        cls,
        *,
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        offline: bool | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HubSettings:
        env = os.environ if environ is None else environ
        hf_home = _expand(env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"))
        if cache_dir is not None:
            hub_cache = Path(cache_dir).expanduser()
        else:
            configured = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
            hub_cache = _expand(configured) if configured else hf_home / "hub"
        assets = env.get("HF_ASSETS_CACHE") or env.get("HUGGINGFACE_ASSETS_CACHE")
        endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        if offline is None:
            offline = _truthy(env.get("HF_HUB_OFFLINE")) or _truthy(env.get("TRANSFORMERS_OFFLINE"))
        explicit_token = token or env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or None
        return cls(
            endpoint=endpoint,
            cache_dir=hub_cache.resolve(),
            assets_dir=(_expand(assets) if assets else hf_home / "assets").resolve(),
            token=explicit_token,
            offline=offline,
        )

    def model_url(self, repo_id: str) -> str:
        """The repository's page (where a gated model's license is accepted)."""
        return f"{self.endpoint}/{repo_id}"


MiB = 2**20


@dataclass(frozen=True)
class HubLimits:
    """Bounds of one lookup (defaults: the webhook's; docs/security.md, "Hub")."""

    max_config_bytes: int = 1 * MiB  # config.json (real ones are a few KB; multimodal ones ~100 KB)
    max_index_bytes: int = 16 * MiB  # model.safetensors.index.json (DeepSeek-V3's is ~8 MB)
    max_header_bytes: int = 8 * MiB  # one safetensors header (huggingface_hub itself allows 25 MB)
    max_shards: int = 256  # safetensors files whose headers are read (DeepSeek-V3: 163)
    max_requests: int = 600  # HTTP requests of one lookup (about 2 per shard, plus config and index)
    max_bytes: int = 32 * MiB  # bytes received by one lookup, all files together
    max_seconds: float = 30.0  # wall time of one lookup (it runs in the background past the review)
    max_concurrent: int = 1  # lookups in flight per process; more are refused at once (KVP041)
    max_cache_bytes: int = 160 * MiB  # the on-disk cache is trimmed to this after each lookup
