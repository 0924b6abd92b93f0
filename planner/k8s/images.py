"""Which vLLM release an image runs, only from evidence (DESIGN.md, Trust boundaries).

An image's tag is a vLLM release only where the publisher says so:

* the vLLM project's own images (``vllm/vllm-openai``, its ROCm, CPU and ECR release repositories):
  the tag *is* the release (``v0.10.1.1`` -> 0.10.1; a fourth part does not change behaviour);
* AMD's ROCm builds (``rocm/vllm``): the tag names the release it contains
  (``rocm6.3.1_vllm_0.8.5_20250521``);
* AIBrix's rebuilds (``aibrix/vllm-openai:v0.7.3.self.post1``, ``...:v0.10.0-cu128-nixl-...``, also
  from the registries AIBrix's samples mirror them to): the vLLM release, then AIBrix's own suffix
  (AIBrix docs, "vLLM Image": a custom build of upstream v0.7.3; samples/disaggregation/vllm);
* NVIDIA's NGC containers, whose tags are NGC release numbers (``25.10-py3``): the release notes list
  the vLLM release each contains, recorded in :data:`NGC_VLLM` and :data:`NGC_TRITON_VLLM`.

Every other image, including ones with "vllm" in their name (``lmcache/vllm-openai:v0.3.7`` is an
LMCache version, ``registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.1`` a Red Hat AI Inference Server
version, ``ghcr.io/llm-d/llm-d:v0.2.0`` an llm-d version) gives no release: unknown, not a guess.
The annotation ``kv-planner.io/vllm-version`` states the release for images like those.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict

VERSION_ANNOTATION = "kv-planner.io/vllm-version"

EvidenceSource = Literal["official-image", "derivative-image", "annotation"]

_RELEASE = r"(\d+\.\d+\.\d+)(?:\.\d+|\.post\d+)?"
# vLLM's own repositories (docker.io/vllm/vllm-openai and its -rocm variant; the CPU and release
# repositories the vLLM docs name on public.ecr.aws/q9t5s3a7).
_OFFICIAL_REPOSITORIES = (
    "vllm/vllm-openai",
    "vllm/vllm-openai-rocm",
    "vllm/vllm-openai-cpu",
    "q9t5s3a7/vllm-release-repo",
    "q9t5s3a7/vllm-cpu-release-repo",
)
_OFFICIAL_TAG = re2.compile(rf"^v?{_RELEASE}(?:$|[-+](?:cu\d+|rocm\S*|cpu|x86_64|aarch64|arm64)\S*$)")
_ROCM_TAG = re2.compile(rf"(?:^|_)vllm_v?{_RELEASE}(?:_|$)")
_AIBRIX_TAG = re2.compile(rf"^v?{_RELEASE}(?:\.self(?:\.post\d+)?)?(?:-cu\d+\S*)?$")
_NGC_TAG = re2.compile(r"^(\d\d\.\d\d)(?:-|$)")

# NVIDIA vLLM container (nvcr.io/nvidia/vllm:YY.MM-py3) -> the vLLM release it contains, from
# "vLLM Release YY.MM" (docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/rel-YY-MM.html),
# section "Contents of the vLLM container". Only releases whose notes were read are listed.
NGC_VLLM: dict[str, str] = {
    "25.10": "0.10.2",
    "26.01": "0.11.1",
    "26.03": "0.17.1",
    "26.05": "0.20.1",
    "26.10": "0.31.0",
}
# Triton's vLLM backend container (nvcr.io/nvidia/tritonserver:YY.MM-vllm-python-py3), from
# "Triton Inference Server Release YY.MM" ("The container also includes ... vLLM version").
NGC_TRITON_VLLM: dict[str, str] = {
    "24.12": "0.5.5",
}


def _mirrors_official(host: str, repository: str) -> bool:
    """The vLLM project's repository, on its registry or a mirror that keeps its path
    (``harbor.corp/dockerhub/vllm/vllm-openai``, ``mirror.example/vllm/vllm-openai``, an ECR pull-through
    cache). A mirror that renames it
    (``registry.local/ml/vllm-openai``) is indistinguishable from a derivative such as
    ``lmcache/vllm-openai``: no evidence."""
    if host in ("docker.io", "public.ecr.aws"):
        return repository in _OFFICIAL_REPOSITORIES
    return any(
        repository == official or repository.endswith("/" + official)
        for official in _OFFICIAL_REPOSITORIES
        if official.startswith("vllm/")
    )


class VersionEvidence(BaseModel):
    """A vLLM release and where it was read."""

    model_config = ConfigDict(frozen=True)

    version: str
    source: EvidenceSource
    detail: str


def _three(version: str) -> str:
    """``0.10.1.1`` / ``0.7.3.post1`` -> ``0.10.1`` (DESIGN's contract is X.Y.Z)."""
    return ".".join(version.split(".")[:3])


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """(repository without registry host, tag, digest) of an image reference."""
    reference, _, digest = image.partition("@")
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    tag = None
    if colon > slash:
        reference, tag = reference[:colon], reference[colon + 1 :]
    parts = reference.split("/")
    # A first part with a dot or a colon, or "localhost", is a registry host (distribution/reference).
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host, parts = parts[0], parts[1:]
    else:
        host = "docker.io"
    repository = "/".join(parts).lower()
    if host == "docker.io" and repository.startswith("library/"):
        repository = repository[len("library/") :]
    return f"{host}/{repository}", tag, digest or None


# Images the release of which is remembered (a cluster runs a few images in every workload: each review read
# them again, ~0.1 ms of re2 matching for an official tag), and the longest image name remembered (an OCI
# reference is at most 255 characters of name and 128 of tag): at most ~200 KB, whatever manifests hold.
RELEASE_MEMO_SIZE = 256
RELEASE_MEMO_CHARS = 512


def image_release(image: str | None) -> VersionEvidence | None:
    """The vLLM release ``image`` runs, when its publisher says so; else None."""
    if not image or not isinstance(image, str):
        return None
    remembered = type(image) is str and len(image) <= RELEASE_MEMO_CHARS
    return _remembered_release(image) if remembered else _image_release(image)


@functools.lru_cache(maxsize=RELEASE_MEMO_SIZE)
def _remembered_release(image: str) -> VersionEvidence | None:
    return _image_release(image)  # (VersionEvidence is frozen: one answer may be shared)


def _image_release(image: str) -> VersionEvidence | None:
    name, tag, _digest = split_image(image.strip())
    if tag is None:
        return None  # `latest` by default, or a digest we hold no mapping for
    host, _, repository = name.partition("/")
    if _mirrors_official(host, repository):
        match = _OFFICIAL_TAG.match(tag)
        if match:
            return VersionEvidence(version=_three(match.group(1)), source="official-image", detail=image)
        return None
    if host == "docker.io" and repository == "rocm/vllm":
        match = _ROCM_TAG.search(tag)
        if match:
            return VersionEvidence(version=_three(match.group(1)), source="derivative-image", detail=image)
        return None
    if repository == "aibrix/vllm-openai" or repository.endswith("/aibrix/vllm-openai"):
        match = _AIBRIX_TAG.match(tag)
        if match:
            return VersionEvidence(version=_three(match.group(1)), source="derivative-image", detail=image)
        return None
    if host == "nvcr.io" and repository in ("nvidia/vllm", "nvidia/tritonserver"):
        ngc = _NGC_TAG.match(tag)
        if ngc is None:
            return None
        if repository == "nvidia/vllm":
            table = NGC_VLLM
        elif "-vllm-" in tag:
            table = NGC_TRITON_VLLM
        else:
            return None
        version = table.get(ngc.group(1))
        if version is not None:
            return VersionEvidence(version=version, source="derivative-image", detail=image)
    return None


_ANNOTATION_VALUE = re2.compile(rf"^v?{_RELEASE}$")


def annotated_release(*annotation_maps: Any) -> tuple[VersionEvidence | None, str | None]:
    """(evidence, problem) from ``kv-planner.io/vllm-version`` on the first map that has it.

    A value that is not a release (``X.Y.Z``, a leading ``v`` and a fourth part accepted) is a
    problem to report, never a version.
    """
    for found in annotation_maps:
        if not isinstance(found, Mapping) or VERSION_ANNOTATION not in found:
            continue
        value = str(found[VERSION_ANNOTATION]).strip()
        match = _ANNOTATION_VALUE.match(value)
        if match is None:
            return None, f"{VERSION_ANNOTATION}: {value[:40]!r} is not a vLLM release (X.Y.Z)"
        return VersionEvidence(version=_three(match.group(1)), source="annotation", detail=value), None
    return None, None
