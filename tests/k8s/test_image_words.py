"""The words of an image name that mark a non-GPU build (planner.k8s.inspect._image_words): the same words
as splitting at ``[^a-z0-9]+`` with re2, without re2 for ASCII names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.k8s.inspect import _IMAGE_WORD, _image_words, _non_gpu_image


def _split_by_re2(name: str) -> list[str]:
    return [word for word in _IMAGE_WORD.split(name) if word]


@pytest.mark.parametrize(
    "name",
    [
        "vllm/vllm-openai:v0.19.0",
        "otel/opentelemetry-collector-contrib:0.110.0",
        "ghcr.io/llm-d/llm-d-xpu:v0.3",
        "--leading//and..trailing--",
        "",
        "-",
        "tab\there\nnewline\x1fcontrol\x7fdel",
        "ünïcode/vllm-tpu:ß",
        "a" * 10_000 + "/" + "-" * 10_000 + "cpu",
    ],
)
def test_the_words_are_re2s(name: str) -> None:
    assert _image_words(name) == _split_by_re2(name)


@given(st.text(alphabet=st.characters(max_codepoint=0x2FF), max_size=80))
def test_any_name_splits_as_re2_does(name: str) -> None:
    assert _image_words(name) == _split_by_re2(name)


@pytest.mark.parametrize(
    ("image", "word"),
    [
        ("vllm/vllm-openai:v0.19.0", None),
        ("vllm/vllm-openai-cpu:v0.19.0", "cpu"),
        ("public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.9.1", "neuron"),
        ("example.com/vllm-neuronx:0.9.1", "neuronx"),
        ("intel/vllm:0.10.2-xpu@sha256:0123cpu", "xpu"),  # (the digest is not read)
        ("VLLM/VLLM-TPU:LATEST", "tpu"),
        ("vllm/vllm-openai:v0.19.0@sha256:cpu", None),
    ],
)
def test_non_gpu_words(image: str, word: str | None) -> None:
    assert _non_gpu_image(image) == word
