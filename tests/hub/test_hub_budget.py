"""Hub repos anyone can publish cannot weaponise a bounded lookup (the webhook's): the real
huggingface_hub client against a local Hub, with planner.hub.budget's limits (docs/security.md, "Hub").

Before: a 300 MB config.json, a 24 MB safetensors header or an index of 2,000 shards were downloaded and
parsed whole (one admission sent 2,000+ requests) and the cache outgrew its 256 MiB mount.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hub_builders import config_bytes, header_only, llama_config, llama_tensors, real_safetensors
from hub_fake_server import Blob, FakeHub, Repo

from planner.errors import HubUnavailableError, ModelResolutionError, ResolutionTimeoutError
from planner.hub.budget import HubLimitError, bound_cache
from planner.hub.resolve import resolve_model
from planner.hub.settings import HubLimits

pytestmark = pytest.mark.timeout(60)
WEBHOOK = HubLimits()


def _publish(hub: FakeHub, repo_id: str, files: dict[str, bytes | Blob]) -> str:
    repo = hub.repos.get(repo_id) or hub.add(Repo(repo_id))
    return repo.commit(files)


def _tiny() -> dict[str, bytes | Blob]:
    config = llama_config()
    return {"config.json": config_bytes(config), "model.safetensors": real_safetensors(llama_tensors(config))}


def _resolve(repo_id: str, limits: HubLimits = WEBHOOK, timeout: float | None = None) -> object:
    return resolve_model(repo_id, local=False, limits=limits, timeout=timeout)


def test_a_huge_config_is_not_downloaded(hub: FakeHub, hf_home: Path) -> None:
    config = llama_config()
    config["padding"] = "x" * (3 * 2**20)  # a valid config.json of 3 MiB (the attack used 300 MB)
    _publish(hub, "evil/config", {**_tiny(), "config.json": json.dumps(config).encode()})
    with pytest.raises(HubLimitError, match=r"config\.json of"):
        _resolve("evil/config")
    assert hub.count("GET", "config.json") == 0  # refused on the HEAD's size, before any download
    assert not list((hf_home / "hub").rglob("config.json"))


def test_a_huge_safetensors_header_is_not_read(hub: FakeHub) -> None:
    tensors = {f"model.layers.{i}.weight": ("BF16", (16, 16)) for i in range(30_000)}  # ~2.4 MB of header
    header, size = header_only(tensors)
    assert len(header) > 2 * 2**20
    _publish(hub, "evil/header", {**_tiny(), "model.safetensors": Blob.of(header, size=size)})
    with pytest.raises(HubLimitError, match="safetensors header"):
        _resolve("evil/header", HubLimits(max_header_bytes=2**20))


def test_an_index_of_2000_shards_sends_no_header_requests(hub: FakeHub) -> None:
    shards = [f"model-{i:05d}-of-02000.safetensors" for i in range(2000)]
    index = {"metadata": {"total_size": 2000 * 1024}, "weight_map": {f"w{i}": name for i, name in enumerate(shards)}}
    one, _ = header_only({"w": ("BF16", (16, 16))})
    files: dict[str, bytes | Blob] = {"config.json": config_bytes(llama_config())}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    files.update({name: Blob.of(one, size=len(one) + 512) for name in shards})
    _publish(hub, "evil/shards", files)
    hub.reset_log()
    with pytest.raises(HubLimitError, match="2000 safetensors shards"):
        _resolve("evil/shards")
    assert not [r for r in hub.requests if r.path.endswith(".safetensors")]  # the index only, no shard
    assert len(hub.requests) < 10


def test_requests_per_lookup_are_bounded(hub: FakeHub) -> None:
    _publish(hub, "acme/tiny", _tiny())
    hub.reset_log()
    with pytest.raises(HubLimitError, match="more than 2 Hub requests"):
        _resolve("acme/tiny", HubLimits(max_requests=2))
    assert len(hub.requests) <= 2


def test_bytes_per_lookup_are_bounded(hub: FakeHub) -> None:
    _publish(hub, "acme/tiny", _tiny())
    with pytest.raises(HubLimitError, match="bytes from the Hub"):
        _resolve("acme/tiny", HubLimits(max_bytes=512))


@pytest.mark.timeout(25)  # below the fake Hub's own hold limit: only the budget can end this lookup
def test_wall_time_per_lookup_is_bounded(hub: FakeHub) -> None:
    _publish(hub, "slow/repo", _tiny())
    release = threading.Event()
    hub.hold["config.json"] = release
    try:
        with pytest.raises(ModelResolutionError):
            _resolve("slow/repo", HubLimits(max_seconds=1.0))
    finally:
        release.set()


def test_concurrent_lookups_are_bounded_and_known_models_never_wait(hub: FakeHub) -> None:
    _publish(hub, "slow/first", _tiny())
    _publish(hub, "acme/second", _tiny())
    release = threading.Event()
    hub.hold["config.json"] = release
    try:
        with pytest.raises(ResolutionTimeoutError):
            _resolve("slow/first", timeout=0.2)  # keeps running in the background, holding the one slot
        with pytest.raises(HubUnavailableError, match="already waiting"):
            _resolve("acme/second", timeout=0.2)
        # A model the catalog knows is answered at once, whatever the Hub is doing.
        assert _resolve("Qwen/Qwen2.5-7B-Instruct", timeout=0.2) is not None
    finally:
        release.set()


def test_the_cache_is_trimmed_to_its_bound(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    for i in range(6):
        blobs = cache / f"models--org--m{i}" / "blobs"
        blobs.mkdir(parents=True)
        (blobs / "data").write_bytes(b"\0" * (2**20))
    (cache / "models--org--m5" / "blobs" / "data").touch()  # the most recently used
    left = bound_cache([cache], 3 * 2**20)
    assert left <= 3 * 2**20
    remaining = sorted(p.name for p in cache.iterdir())
    assert len(remaining) == 3 and "models--org--m5" in remaining


def test_a_lookup_keeps_the_cache_within_its_bound(hub: FakeHub, hf_home: Path) -> None:
    limits = HubLimits(max_cache_bytes=16 * 1024)
    for i in range(8):
        _publish(hub, f"acme/m{i}", _tiny())
        _resolve(f"acme/m{i}", limits)
    used = sum(p.stat().st_size for p in (hf_home / "hub").rglob("*") if p.is_file() and not p.is_symlink())
    assert used <= 16 * 1024
