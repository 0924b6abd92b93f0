"""Image -> vLLM release only from evidence (planner.k8s.images; DESIGN.md, Trust boundaries)."""

from __future__ import annotations

import pytest

from planner.k8s.images import annotated_release, image_release


@pytest.mark.parametrize(
    ("image", "version", "source"),
    [
        ("vllm/vllm-openai:v0.10.1.1", "0.10.1", "official-image"),
        ("docker.io/vllm/vllm-openai:v0.19.0", "0.19.0", "official-image"),
        ("vllm/vllm-openai:v0.9.0-cu126", "0.9.0", "official-image"),
        ("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.11.2", "0.11.2", "official-image"),
        ("harbor.corp.example/dockerhub/vllm/vllm-openai:v0.19.0", "0.19.0", "official-image"),
        ("mirror.example.com/vllm/vllm-openai:0.11.0", "0.11.0", "official-image"),
        ("vllm/vllm-openai-cpu:v0.19.0", "0.19.0", "official-image"),
        ("rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521", "0.8.5", "derivative-image"),
        ("aibrix/vllm-openai:v0.7.3.self.post1", "0.7.3", "derivative-image"),
        (
            "registry.example.com/aibrix/vllm-openai:v0.10.0-cu128-nixl-v0.4.1-lmcache-0.3.2",
            "0.10.0",
            "derivative-image",
        ),
        ("nvcr.io/nvidia/vllm:25.10-py3", "0.10.2", "derivative-image"),
        ("nvcr.io/nvidia/vllm:26.01-py3", "0.11.1", "derivative-image"),
        ("nvcr.io/nvidia/tritonserver:24.12-vllm-python-py3", "0.5.5", "derivative-image"),
    ],
)
def test_publisher_mappings(image: str, version: str, source: str) -> None:
    evidence = image_release(image)
    assert evidence is not None and (evidence.version, evidence.source) == (version, source)


@pytest.mark.parametrize(
    "image",
    [
        "lmcache/vllm-openai:v0.3.7",  # an LMCache version (production-stack's example)
        "registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.1",  # a Red Hat AI Inference Server version
        "nvcr.io/nvidia/tritonserver:25.01-vllm-python-py3",  # a Triton release whose notes we hold no row for
        "nvcr.io/nvidia/tritonserver:24.12-py3",  # Triton without the vLLM backend
        "nvcr.io/nvidia/vllm:25.01-py3",  # an NGC release not recorded
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.0",  # a Dynamo version
        "ghcr.io/llm-d/llm-d:v0.2.0",  # an llm-d version
        "kserve/huggingfaceserver:v0.15.0",  # a KServe version
        "rayproject/ray-llm:2.52.0-py311-cu128",  # a Ray version
        "registry.local:5000/ml/vllm-openai:v0.19.0",  # renamed: could be any derivative
        "vllm/vllm-openai:latest",
        "vllm/vllm-openai:nightly",
        "vllm/vllm-openai@sha256:0123abcd",
        "vllm/vllm-tpu:23194d83e8f2a6783b0d8c275f5f8a22faab9aec",
        "myorg/vllm-server:1.2.3",
        "vllm/vllm-omni:v0.20.0",  # vLLM-Omni's own version
        "quay.io/ascend/vllm-ascend:v0.11.0rc1-a3",  # the vllm-ascend plugin's version
        "aibrix/vllm-openai:v0.6.1-edb07092-20250118",  # a commit build: not the release itself
        "",
    ],
)
def test_no_evidence_no_version(image: str) -> None:
    assert image_release(image) is None


def test_annotation_states_the_release() -> None:
    evidence, problem = annotated_release({"kv-planner.io/vllm-version": "v0.10.1.1"})
    assert problem is None and evidence is not None and evidence.version == "0.10.1"
    evidence, problem = annotated_release(None, {"kv-planner.io/vllm-version": "latest"})
    assert evidence is None and problem is not None and "not a vLLM release" in problem
    assert annotated_release({"other": "x"}) == (None, None)


def test_stand_ins_are_not_vllm_images() -> None:
    from planner.k8s.detect import is_vllm_image

    assert is_vllm_image("vllm/vllm-openai:v0.19.0") and is_vllm_image("lmcache/vllm-openai:v0.3.7")
    assert not is_vllm_image("aibrix/vllm-mock:nightly")
    assert not is_vllm_image("aibrix/vllm-simulator-a40:nightly")


def test_release_memo_is_bounded() -> None:
    """image_release remembers at most RELEASE_MEMO_SIZE images of at most RELEASE_MEMO_CHARS characters, and
    a remembered answer is the one it would compute."""
    from planner.k8s import images

    images._remembered_release.cache_clear()
    for i in range(images.RELEASE_MEMO_SIZE + 50):
        image = f"registry.example.com/team-{i}/vllm/vllm-openai:v0.{i % 20}.0"
        assert image_release(image) == images._image_release(image)
        assert image_release(image) == images._image_release(image)  # (remembered now)
    info = images._remembered_release.cache_info()
    assert info.currsize == images.RELEASE_MEMO_SIZE and info.hits == images.RELEASE_MEMO_SIZE + 50
    long_image = "vllm/vllm-openai:v0.19.0-" + "x" * images.RELEASE_MEMO_CHARS
    assert image_release(long_image) == images._image_release(long_image)
    assert images._remembered_release.cache_info().misses == info.misses  # (too long: not remembered)
