"""resolve_model against a local Hub: the real huggingface_hub client over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hub_builders import (
    big_llama_layout,
    config_bytes,
    header_only,
    llama_config,
    llama_tensors,
    real_safetensors,
    tensor_bytes,
)
from hub_fake_server import Blob, FakeHub, Repo

from planner.errors import GatedModelError, ModelNotFoundError, UnknownModelError
from planner.hub.resolve import clear_resolution_cache, resolve_model
from planner.models.config import parse_config

LLAMA_31_8B = {"layers": 32, "hidden": 4096, "inter": 14336, "vocab": 128256, "heads": 32, "kv": 8}


def publish_tiny(hub: FakeHub, repo_id: str = "acme/tiny-llama", **overrides: object) -> tuple[Repo, str, int]:
    config = llama_config(**overrides)
    tensors = llama_tensors(config)
    repo = hub.repos.get(repo_id) or hub.add(Repo(repo_id))
    sha = repo.commit(
        {
            "config.json": config_bytes(config),
            "model.safetensors": real_safetensors(tensors),
            "README.md": b"# tiny",
        }
    )
    return repo, sha, sum(a.nbytes for a in tensors.values())


def snapshot(hf_home: Path, repo_id: str, sha: str) -> Path:
    return hf_home / "hub" / ("models--" + repo_id.replace("/", "--")) / "snapshots" / sha


def test_public_model_exact_bytes_without_downloading_weights(hub: FakeHub, hf_home: Path) -> None:
    _, sha, exact = publish_tiny(hub)
    resolved = resolve_model("acme/tiny-llama")
    assert resolved.source == "hub" and resolved.revision == sha
    assert resolved.checkpoint is not None and resolved.checkpoint.exact
    assert resolved.spec.checkpoint_bytes == resolved.checkpoint.total_bytes == exact
    assert resolved.spec.id == "acme/tiny-llama" and resolved.spec.num_layers == 2
    # The config.json read, which --hf-overrides is applied to (planner/vllm/hf_overrides.py)
    assert resolved.config is not None and resolved.config["num_hidden_layers"] == 2
    # The standard cache layout, as vLLM and huggingface-cli leave it: refs/main -> sha, snapshot files.
    repo_cache = hf_home / "hub" / "models--acme--tiny-llama"
    assert (repo_cache / "refs" / "main").read_text() == sha
    assert (snapshot(hf_home, "acme/tiny-llama", sha) / "config.json").is_file()
    assert resolved.location == str(snapshot(hf_home, "acme/tiny-llama", sha))
    # Weights: only range requests for the header, never the file itself.
    weight_requests = [r for r in hub.requests if r.path.endswith("model.safetensors")]
    assert weight_requests and all(r.method == "GET" and r.range for r in weight_requests)
    assert not (snapshot(hf_home, "acme/tiny-llama", sha) / "model.safetensors").exists()


def test_repeat_lookups_use_memory_then_disk(hub: FakeHub) -> None:
    publish_tiny(hub)
    first = resolve_model("acme/tiny-llama")
    hub.reset_log()
    assert resolve_model("acme/tiny-llama") == first
    assert hub.count() == 0  # served from memory
    clear_resolution_cache()  # a new process: the Hugging Face cache and the header summary remain
    assert resolve_model("acme/tiny-llama").checkpoint == first.checkpoint
    assert hub.count(contains="model.safetensors") == 0
    assert hub.count("GET", "config.json") == 0  # HEAD only: the cached file is current


def test_revision_pins_branch_tag_or_commit(hub: FakeHub, hf_home: Path) -> None:
    repo, old_sha, old_bytes = publish_tiny(hub)
    repo.refs["v1"] = old_sha
    _, new_sha, new_bytes = publish_tiny(hub, num_hidden_layers=4)
    assert old_bytes != new_bytes

    latest = resolve_model("acme/tiny-llama")
    assert (latest.revision, latest.spec.num_layers, latest.spec.checkpoint_bytes) == (new_sha, 4, new_bytes)
    tagged = resolve_model("acme/tiny-llama", revision="v1")
    assert (tagged.revision, tagged.spec.num_layers, tagged.spec.checkpoint_bytes) == (old_sha, 2, old_bytes)
    pinned = resolve_model("acme/tiny-llama", revision=old_sha)
    assert pinned.revision == old_sha and pinned.spec.checkpoint_bytes == old_bytes
    # The weights were read at the commit the revision named, not at whatever main is now.
    assert hub.count("GET", f"/resolve/{old_sha}/model.safetensors") >= 1
    assert (hf_home / "hub" / "models--acme--tiny-llama" / "refs" / "v1").read_text() == old_sha


def test_gated_model_without_token_names_license_url_and_token(hub: FakeHub) -> None:
    repo, _, _ = publish_tiny(hub, "meta-x/Gated-8B")
    repo.gated, repo.license, repo.accepted_tokens = True, "llama3.1", {"hf_good"}
    with pytest.raises(GatedModelError) as caught:
        resolve_model("meta-x/Gated-8B")
    text = str(caught.value)
    assert "gated" in text and "needs a Hugging Face token" in text
    assert "llama3.1 license" in text and f"{hub.url}/meta-x/Gated-8B" in text
    assert "--token" in text and "HF_TOKEN" in text
    assert caught.value.model == "meta-x/Gated-8B"


def test_gated_model_with_a_token_that_has_no_access(hub: FakeHub) -> None:
    repo, _, _ = publish_tiny(hub, "meta-x/Gated-8B")
    repo.gated, repo.license, repo.accepted_tokens = True, "llama3.1", {"hf_good"}
    with pytest.raises(GatedModelError, match="has no access") as caught:
        resolve_model("meta-x/Gated-8B", token="hf_other")
    assert "llama3.1 license" in str(caught.value)
    assert any(r.authorization == "Bearer hf_other" for r in hub.requests)


def test_gated_model_with_an_accepted_token_from_flag_or_env(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, sha, exact = publish_tiny(hub, "meta-x/Gated-8B")
    repo.gated, repo.accepted_tokens = True, {"hf_good"}
    assert resolve_model("meta-x/Gated-8B", token="hf_good").spec.checkpoint_bytes == exact
    clear_resolution_cache()
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    hub.reset_log()
    assert resolve_model("meta-x/Gated-8B", refresh=True).revision == sha
    assert all(r.authorization == "Bearer hf_good" for r in hub.requests)


def test_missing_repo_revision_and_config(hub: FakeHub) -> None:
    with pytest.raises(ModelNotFoundError, match="was not found") as caught:
        resolve_model("acme/does-not-exist")
    assert "private" in str(caught.value) and "HF_TOKEN" in str(caught.value)
    publish_tiny(hub)
    with pytest.raises(ModelNotFoundError, match="Revision 'v9'"):
        resolve_model("acme/tiny-llama", revision="v9")
    repo = hub.add(Repo("acme/weights-only"))
    repo.commit({"model.safetensors": real_safetensors({"w": np.zeros(4, np.float32)})})
    with pytest.raises(ModelNotFoundError, match=r"has no config\.json"):
        resolve_model("acme/weights-only")


def test_invalid_names_are_input_errors(hub: FakeHub) -> None:
    for name in ("not a model!", "a/b--c", "-bad/name"):
        with pytest.raises(UnknownModelError):
            resolve_model(name)
    assert hub.count() == 0


def test_repo_without_safetensors_is_estimated_with_a_warning(hub: FakeHub) -> None:
    repo = hub.add(Repo("acme/old-bin"))
    repo.commit({"config.json": config_bytes(llama_config()), "pytorch_model.bin": b"\0" * 64})
    resolved = resolve_model("acme/old-bin")
    assert resolved.checkpoint is not None and resolved.checkpoint.format == "estimate"
    assert not resolved.checkpoint.exact and resolved.spec.checkpoint_bytes is None
    assert any("pytorch_model.bin" in w and "estimated" in w for w in resolved.warnings)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def step(self, description: str) -> None:
        self.events.append(("step", description))

    def files(self, description: str, total: int) -> None:
        self.events.append(("files", total))

    def advance(self) -> None:
        self.events.append(("advance", None))


def publish_sharded_llama_8b(hub: FakeHub, repo_id: str, *, shards: int = 3) -> int:
    """A Llama-3.1-8B-shaped checkpoint in BF16, as virtual shards + index (8,030,261,248 parameters)."""
    d = LLAMA_31_8B
    layout = big_llama_layout(d["layers"], d["hidden"], d["inter"], d["vocab"], d["heads"], d["kv"])
    names = list(layout)
    files: dict[str, bytes | Blob] = {}
    weight_map: dict[str, str] = {}
    for n in range(shards):
        shard = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: layout[k] for k in names[n::shards]}
        header, size = header_only(part)
        files[shard] = Blob.of(header, size=size)
        weight_map.update(dict.fromkeys(part, shard))
    total = tensor_bytes(layout)
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}
    ).encode()
    # A stale shard that the index does not list: vLLM does not load it, neither do we count it.
    stale, stale_size = header_only({"old.weight": ("F32", (1000, 1000))})
    files["model-old.safetensors"] = Blob.of(stale, size=stale_size)
    config = llama_config(
        hidden_size=d["hidden"],
        intermediate_size=d["inter"],
        num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"],
        num_key_value_heads=d["kv"],
        vocab_size=d["vocab"],
        max_position_embeddings=131072,
    )
    files["config.json"] = config_bytes(config)
    hub.add(Repo(repo_id)).commit(files)
    return total


def test_sharded_checkpoint_headers_over_range_requests(hub: FakeHub) -> None:
    total = publish_sharded_llama_8b(hub, "acme/Llama-8B")
    recorder = Recorder()
    resolved = resolve_model("acme/Llama-8B", progress=recorder)
    assert resolved.checkpoint is not None
    assert resolved.checkpoint.total_bytes == total == 16_060_522_496  # Llama-3.1-8B in BF16
    assert resolved.spec.parameters == 8_030_261_248
    assert resolved.checkpoint.dtypes["BF16"].bytes == total
    assert [f.name for f in resolved.checkpoint.files] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert hub.count("GET", "model-old.safetensors") == 0
    assert ("files", 3) in recorder.events and recorder.events.count(("advance", None)) == 3


def test_fp8_checkpoint_with_scales(hub: FakeHub) -> None:
    d = LLAMA_31_8B
    layout = big_llama_layout(d["layers"], d["hidden"], d["inter"], d["vocab"], d["heads"], d["kv"])
    fp8: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, (dtype, shape) in layout.items():
        if ".layers." in name and len(shape) == 2:
            fp8[name] = ("F8_E4M3", shape)
            fp8[name + "_scale"] = ("F32", ())
            fp8[name.replace(".weight", ".input_scale")] = ("F32", ())
        else:
            fp8[name] = (dtype, shape)
    header, size = header_only(fp8)
    config = llama_config(
        hidden_size=d["hidden"],
        intermediate_size=d["inter"],
        num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"],
        num_key_value_heads=d["kv"],
        vocab_size=d["vocab"],
        quantization_config={"quant_method": "fp8", "activation_scheme": "static"},
    )
    hub.add(Repo("acme/Llama-8B-FP8")).commit(
        {"config.json": config_bytes(config), "model.safetensors": Blob.of(header, size=size)}
    )
    checkpoint = resolve_model("acme/Llama-8B-FP8").checkpoint
    assert checkpoint is not None and checkpoint.exact
    linear = 6_979_584_000 - 32 * 2 * 4096  # every decoder linear (layer norms stay BF16)
    scales = 32 * 7 * 2
    assert checkpoint.dtypes["F8_E4M3"].bytes == linear
    assert checkpoint.dtypes["F32"].bytes == scales * 4
    assert checkpoint.dtypes["BF16"].bytes == 2 * (2 * 128256 * 4096 + 4096 + 32 * 2 * 4096)
    assert checkpoint.logical_parameters == 8_030_261_248
    assert checkpoint.quantization_bytes == scales * 4
    assert checkpoint.total_bytes == size - len(header)


def _awq_or_gptq(config: dict[str, object], kind: str, group: int) -> dict[str, np.ndarray]:
    """Real packed int32 tensors for every decoder linear of the tiny Llama."""
    tensors: dict[str, np.ndarray] = {}
    for name, array in llama_tensors(config).items():
        if ".layers." in name and array.ndim == 2:
            out, inp = array.shape
            base = name[: -len(".weight")]
            if kind == "awq":
                tensors[base + ".qweight"] = np.zeros((inp, out // 8), np.int32)
            else:
                tensors[base + ".qweight"] = np.zeros((inp // 8, out), np.int32)
                tensors[base + ".g_idx"] = np.zeros((inp,), np.int32)
            tensors[base + ".qzeros"] = np.zeros((inp // group, out // 8), np.int32)
            tensors[base + ".scales"] = np.zeros((inp // group, out), np.float16)
        else:
            tensors[name] = array
    return tensors


@pytest.mark.parametrize("kind", ["awq", "gptq"])
def test_awq_and_gptq_packed_checkpoints(hub: FakeHub, kind: str) -> None:
    group = 32
    config = llama_config(
        torch_dtype="float16", quantization_config={"quant_method": kind, "bits": 4, "group_size": group}
    )
    tensors = _awq_or_gptq(config, kind, group)
    hub.add(Repo(f"acme/tiny-{kind}")).commit(
        {"config.json": config_bytes(config), "model.safetensors": real_safetensors(tensors)}
    )
    resolved = resolve_model(f"acme/tiny-{kind}")
    checkpoint = resolved.checkpoint
    assert checkpoint is not None
    assert checkpoint.total_bytes == sum(a.nbytes for a in tensors.values())
    # Unpacked, the model has exactly the parameters of its unquantized twin.
    assert checkpoint.logical_parameters == sum(a.size for a in llama_tensors(config).values())
    aux = sum(a.nbytes for k, a in tensors.items() if k.endswith((".qzeros", ".scales", ".g_idx")))
    assert checkpoint.quantization_bytes == aux
    assert resolved.spec.quantization is not None and resolved.spec.quantization.method == kind


def test_mxfp4_gpt_oss_checkpoint(hub: FakeHub, model_configs_dir: Path) -> None:
    config = json.loads((model_configs_dir / "openai--gpt-oss-20b.json").read_text())
    h, e, inter = config["hidden_size"], config["num_local_experts"], config["intermediate_size"]
    heads, kv, hd, vocab = (
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["head_dim"],
        config["vocab_size"],
    )
    layout: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (vocab, h)),
        "lm_head.weight": ("BF16", (vocab, h)),
        "model.norm.weight": ("BF16", (h,)),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for proj, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            layout[f"{p}self_attn.{proj}.weight"] = ("BF16", (rows, h))
            layout[f"{p}self_attn.{proj}.bias"] = ("BF16", (rows,))
        layout[f"{p}self_attn.o_proj.weight"] = ("BF16", (h, heads * hd))
        layout[f"{p}self_attn.o_proj.bias"] = ("BF16", (h,))
        layout[f"{p}self_attn.sinks"] = ("BF16", (heads,))
        layout[f"{p}mlp.router.weight"] = ("BF16", (e, h))
        layout[f"{p}mlp.router.bias"] = ("BF16", (e,))
        layout[f"{p}mlp.experts.gate_up_proj_blocks"] = ("U8", (e, 2 * inter, h // 32, 16))
        layout[f"{p}mlp.experts.gate_up_proj_scales"] = ("U8", (e, 2 * inter, h // 32))
        layout[f"{p}mlp.experts.gate_up_proj_bias"] = ("BF16", (e, 2 * inter))
        layout[f"{p}mlp.experts.down_proj_blocks"] = ("U8", (e, h, inter // 32, 16))
        layout[f"{p}mlp.experts.down_proj_scales"] = ("U8", (e, h, inter // 32))
        layout[f"{p}mlp.experts.down_proj_bias"] = ("BF16", (e, h))
        layout[f"{p}input_layernorm.weight"] = ("BF16", (h,))
        layout[f"{p}post_attention_layernorm.weight"] = ("BF16", (h,))
    header, size = header_only(layout)
    hub.add(Repo("acme/gpt-oss-20b-mirror")).commit(
        {"config.json": json.dumps(config).encode(), "model.safetensors": Blob.of(header, size=size)}
    )
    checkpoint = resolve_model("acme/gpt-oss-20b-mirror").checkpoint
    assert checkpoint is not None and checkpoint.total_bytes == tensor_bytes(layout)
    # The model card's 20.9B parameters appear once the 4-bit blocks are unpacked (2 per byte).
    assert checkpoint.logical_parameters is not None
    assert 20.85e9 < checkpoint.logical_parameters < 20.95e9
    assert checkpoint.parameters is not None and checkpoint.parameters < 12e9  # as stored


def test_catalog_answers_before_the_hub(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_config(llama_config(), model_id="acme/catalogued")
    fake = types.ModuleType("planner.models.catalog")

    def lookup_model(name: str):  # type: ignore[no-untyped-def]
        if name in ("acme/catalogued", "catalogued"):
            return spec
        raise UnknownModelError(name, ["acme/catalogued"])

    fake.lookup_model = lookup_model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "planner.models.catalog", fake)
    resolved = resolve_model("catalogued")
    assert resolved.source == "catalog" and resolved.spec is spec and hub.count() == 0
    with pytest.raises(UnknownModelError, match="Did you mean 'acme/catalogued'"):
        resolve_model("catalogued model")
    publish_tiny(hub, "acme/catalogued")
    assert resolve_model("acme/catalogued", revision="main").source == "hub"  # a pinned revision asks the Hub


def test_endpoint_is_read_per_call(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    publish_tiny(hub, "acme/on-first")
    assert resolve_model("acme/on-first").source == "hub"
    with FakeHub().running() as mirror:
        _, sha, _ = publish_tiny(mirror, "acme/on-mirror")
        monkeypatch.setenv("HF_ENDPOINT", mirror.url)
        assert resolve_model("acme/on-mirror").revision == sha
        assert hub.count(contains="on-mirror") == 0


def test_mirror_without_model_api_is_probed(hub: FakeHub) -> None:
    total = publish_sharded_llama_8b(hub, "acme/Llama-8B")
    hub.model_api = False
    resolved = resolve_model("acme/Llama-8B")
    assert resolved.checkpoint is not None and resolved.checkpoint.total_bytes == total
