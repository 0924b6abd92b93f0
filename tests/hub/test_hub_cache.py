"""Offline use, the Hub being down, the webhook's time budget, corrupted and interrupted cache entries."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from hub_builders import config_bytes, llama_config, llama_tensors, real_safetensors
from hub_fake_server import FakeHub, Repo
from huggingface_hub import snapshot_download

from planner.errors import (
    HubUnavailableError,
    InvalidArgumentError,
    ModelResolutionError,
    ResolutionTimeoutError,
)
from planner.hub.resolve import clear_resolution_cache, resolve_model

REPO = "acme/tiny-llama"


def publish(hub: FakeHub, *, shards: int = 1, **overrides: object) -> tuple[str, int]:
    config = llama_config(**overrides)
    tensors = llama_tensors(config)
    files: dict[str, bytes] = {"config.json": config_bytes(config)}
    if shards == 1:
        files["model.safetensors"] = real_safetensors(tensors)
    else:
        names = sorted(tensors)
        weight_map = {}
        for n in range(shards):
            shard = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
            files[shard] = real_safetensors({k: tensors[k] for k in names[n::shards]})
            weight_map.update(dict.fromkeys(names[n::shards], shard))
        total = sum(a.nbytes for a in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        files["model.safetensors.index.json"] = json.dumps(index).encode()
    repo = hub.repos.get(REPO) or hub.add(Repo(REPO))
    return repo.commit(files), sum(a.nbytes for a in tensors.values())


def repo_cache(hf_home: Path) -> Path:
    return hf_home / "hub" / "models--acme--tiny-llama"


def go_offline(monkeypatch: pytest.MonkeyPatch, hub: FakeHub) -> None:
    clear_resolution_cache()  # as in a new process
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.reset_log()


def test_offline_cache_hit_makes_no_request(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    sha, exact = publish(hub)
    online = resolve_model(REPO)
    go_offline(monkeypatch, hub)
    offline = resolve_model(REPO)
    assert offline.source == "hub-cache" and offline.revision == sha
    assert offline.checkpoint == online.checkpoint and offline.spec.checkpoint_bytes == exact
    assert hub.count() == 0
    # offline=True does the same without the environment variable.
    monkeypatch.delenv("HF_HUB_OFFLINE")
    clear_resolution_cache()
    assert resolve_model(REPO, offline=True).source == "hub-cache" and hub.count() == 0


def test_offline_cache_miss_is_a_clear_error(hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    publish(hub)
    go_offline(monkeypatch, hub)
    with pytest.raises(HubUnavailableError) as caught:
        resolve_model(REPO)
    text = str(caught.value)
    assert "offline mode is on" in text and str(hf_home / "hub") in text and "HF_HUB_OFFLINE" in text
    assert hub.count() == 0
    with pytest.raises(InvalidArgumentError, match="--refresh"):
        resolve_model(REPO, refresh=True)


def test_offline_pinned_tag_uses_its_ref(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    old_sha, old_bytes = publish(hub)
    hub.repos[REPO].refs["v1"] = old_sha
    publish(hub, num_hidden_layers=3)
    resolve_model(REPO, revision="v1")
    go_offline(monkeypatch, hub)
    offline = resolve_model(REPO, revision="v1")
    assert offline.revision == old_sha and offline.spec.checkpoint_bytes == old_bytes
    with pytest.raises(HubUnavailableError):
        resolve_model(REPO)  # main was never fetched


def test_offline_from_a_vllm_pod_cache_reads_the_cached_weights(
    hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha, exact = publish(hub, shards=3)
    # vLLM downloads the snapshot (weights included) into the same cache with huggingface_hub.
    snapshot_download(REPO, cache_dir=hf_home / "hub", endpoint=hub.url)
    assert not (hf_home / "assets").exists()  # kv-planner has never looked at this model
    go_offline(monkeypatch, hub)
    resolved = resolve_model(REPO)
    assert resolved.source == "hub-cache" and resolved.revision == sha
    assert resolved.checkpoint is not None and resolved.checkpoint.exact
    assert resolved.checkpoint.total_bytes == exact and len(resolved.checkpoint.files) == 3
    assert hub.count() == 0


def test_offline_with_only_the_index_cached_uses_its_total(
    hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, exact = publish(hub, shards=2)
    resolve_model(REPO)
    shutil.rmtree(hf_home / "assets")  # lose kv-planner's header summary: only config + index remain
    go_offline(monkeypatch, hub)
    resolved = resolve_model(REPO)
    assert resolved.checkpoint is not None
    assert resolved.checkpoint.format == "safetensors-index" and resolved.checkpoint.total_bytes == exact
    assert resolved.spec.checkpoint_bytes == exact
    assert any("index" in w for w in resolved.warnings)


def test_offline_without_headers_falls_back_to_an_estimate(
    hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(hub)
    resolve_model(REPO)
    shutil.rmtree(hf_home / "assets")
    go_offline(monkeypatch, hub)
    resolved = resolve_model(REPO)
    assert resolved.checkpoint is not None and not resolved.checkpoint.exact
    assert any("estimated" in w for w in resolved.warnings)


def test_hub_down_uses_the_cache_with_a_warning(hub: FakeHub) -> None:
    sha, exact = publish(hub)
    resolve_model(REPO)
    clear_resolution_cache()
    hub.stop()
    resolved = resolve_model(REPO)
    assert resolved.source == "hub-cache" and resolved.revision == sha and resolved.spec.checkpoint_bytes == exact
    assert any("could not be reached" in w for w in resolved.warnings)
    with pytest.raises(HubUnavailableError, match="Cannot reach the Hub"):
        resolve_model("acme/never-fetched")


def test_timeout_budget_returns_while_the_hub_still_stalls(hub: FakeHub) -> None:
    sha, exact = publish(hub)
    release = threading.Event()
    hub.hold["config.json"] = release
    with pytest.raises(ResolutionTimeoutError, match=r"not resolved within 0\.2 s"):
        resolve_model(REPO, timeout=0.2)
    # The call came back while the server was still holding the request: the budget, not the Hub, decided.
    assert hub.holding.is_set() and not release.is_set()
    release.set()
    # A later call joins the lookup still in flight (it does not start another) and gets its result.
    joined = resolve_model(REPO, timeout=30)
    assert joined.revision == sha and joined.spec.checkpoint_bytes == exact
    assert hub.count("HEAD", "config.json") == 1
    hub.reset_log()
    assert resolve_model(REPO, timeout=0.01) == joined  # now answered from memory
    assert hub.count() == 0


def test_corrupted_cached_config_is_downloaded_again(hub: FakeHub, hf_home: Path) -> None:
    sha, _ = publish(hub)
    resolve_model(REPO)
    cached = repo_cache(hf_home) / "snapshots" / sha / "config.json"
    cached.resolve().write_text('{"architectures": [')  # truncated by a disk problem
    clear_resolution_cache()
    hub.reset_log()
    resolved = resolve_model(REPO)
    assert resolved.spec.num_layers == 2
    assert hub.count("GET", "config.json") == 1
    assert cached.read_text().startswith("{")  # replaced atomically, valid again
    json.loads(cached.read_text())


def test_corrupted_cache_offline_is_a_clear_error(hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sha, _ = publish(hub)
    resolve_model(REPO)
    cached = repo_cache(hf_home) / "snapshots" / sha / "config.json"
    cached.resolve().write_bytes(b"\xff\xfe garbage")
    go_offline(monkeypatch, hub)
    with pytest.raises(ModelResolutionError, match="corrupted") as caught:
        resolve_model(REPO)
    assert "--refresh" in str(caught.value) and str(cached) in str(caught.value)


def test_corrupted_header_summary_is_recomputed(hub: FakeHub, hf_home: Path) -> None:
    _, exact = publish(hub)
    resolve_model(REPO)
    (summary,) = (hf_home / "assets").rglob("checkpoint.json")
    summary.write_text("{broken")
    clear_resolution_cache()
    assert resolve_model(REPO).spec.checkpoint_bytes == exact
    assert json.loads(summary.read_text())["v"] == 1


def test_interrupted_download_is_retried(hub: FakeHub) -> None:
    publish(hub)
    hub.faults["config.json"] = ["truncate"]  # the response is cut in half and the connection dropped
    resolved = resolve_model(REPO)
    assert resolved.spec.num_layers == 2
    assert hub.count("GET", "config.json") == 2  # huggingface_hub fetched it again, then completed


def test_failed_download_leaves_nothing_half_written(
    hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha, _ = publish(hub)
    hub.faults["config.json"] = ["truncate", "error"]  # and the retry fails too
    with pytest.raises(HubUnavailableError, match="HTTP 500"):
        resolve_model(REPO)
    cache = repo_cache(hf_home)
    assert not (cache / "snapshots" / sha / "config.json").exists()
    assert [p.name for p in (cache / "blobs").iterdir()] == []  # no partial blob, no .incomplete file
    go_offline(monkeypatch, hub)
    with pytest.raises(HubUnavailableError, match="offline"):
        resolve_model(REPO)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert resolve_model(REPO).revision == sha


def test_refresh_bypasses_memory_and_disk(hub: FakeHub) -> None:
    first_sha, _ = publish(hub)
    assert resolve_model(REPO).revision == first_sha
    second_sha, second_bytes = publish(hub, vocab_size=512)
    assert resolve_model(REPO).revision == first_sha  # the memo holds main for a while
    hub.reset_log()
    refreshed = resolve_model(REPO, refresh=True)
    assert refreshed.revision == second_sha and refreshed.spec.checkpoint_bytes == second_bytes
    assert hub.count("GET", "config.json") == 1
    hub.reset_log()
    again = resolve_model(REPO, refresh=True)  # same commit: headers are still read again
    assert again == refreshed and hub.count("GET", "model.safetensors") >= 1


def test_unknown_dtype_never_reaches_the_user_as_a_traceback(hub: FakeHub) -> None:
    repo = hub.add(Repo("acme/broken"))
    good = real_safetensors({"w": np.zeros(4, np.float32)})
    repo.commit(
        {
            "config.json": config_bytes(llama_config()),
            "model.safetensors": b"\x08\0\0\0\0\0\0\0{nope}  " + good,
        }
    )
    with pytest.raises(ModelResolutionError, match="invalid safetensors header"):
        resolve_model("acme/broken")


def test_cache_folder_from_argument_or_environment(
    hub: FakeHub, hf_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha, _ = publish(hub)
    download_dir = tmp_path / "download-dir"  # like vLLM's --download-dir
    assert resolve_model(REPO, cache_dir=download_dir).location == str(
        download_dir / "models--acme--tiny-llama" / "snapshots" / sha
    )
    mounted = tmp_path / "pvc" / "hub"  # like a pod's HF_HUB_CACHE on a volume
    monkeypatch.setenv("HF_HUB_CACHE", str(mounted))
    clear_resolution_cache()
    assert resolve_model(REPO).location == str(mounted / "models--acme--tiny-llama" / "snapshots" / sha)
    assert not (hf_home / "hub").exists()
