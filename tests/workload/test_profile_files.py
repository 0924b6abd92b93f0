"""The workload profile: its YAML/JSON shape, files, CSV histograms and Prometheus results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.errors import WorkloadProfileError
from planner.workload import (
    WorkloadProfile,
    buckets_from_prometheus_result,
    load_workload_file,
    parse_workload,
    parse_workload_text,
    profile_from_histograms,
)

CONTRACT_EXAMPLE = """
prompt_tokens: {p50: 800, p90: 3000, p99: 12000}
output_tokens: {p50: 200, p90: 800, p99: 2000}
prefix_cache_hit_rate: 0.0
target_risk: 0.01
"""


def test_the_contract_example_parses_and_round_trips() -> None:
    profile = parse_workload_text(CONTRACT_EXAMPLE)
    assert profile.prompt_tokens == {"p50": 800, "p90": 3000, "p99": 12000}
    assert profile.target_risk == 0.01
    again = parse_workload(json.loads(profile.model_dump_json()))
    assert again == profile
    assert profile.prompt_distribution.quantile(0.9, cap=32768) == 3000


def test_annotation_json_and_defaults() -> None:
    profile = parse_workload_text('{"prompt_tokens": 1000, "output_tokens": {"p50": 100, "max": 400}}')
    assert profile.prefix_cache_hit_rate == 0.0 and profile.target_risk == 0.01
    assert profile.prompt_distribution.description == "fixed 1000"


def test_inline_histogram() -> None:
    profile = parse_workload(
        {"prompt_tokens": {"histogram": [[128, 40], [512, 300], ["+Inf", 2]]}, "output_tokens": 64}
    )
    assert profile.prompt_distribution.cdf([512], cap=4096)[0] == pytest.approx(340 / 342)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"prompt_tokens": {"p50": 800}}, "output_tokens"),
        ({"prompt_tokens": {"p50": 800}, "output_tokens": 10}, "at least two percentiles"),
        ({"prompt_tokens": 10, "output_tokens": 10, "target_risk": 0.9}, "target_risk"),
        ({"prompt_tokens": 10, "output_tokens": 10, "prefix_cache_hit_rate": 1.0}, "prefix_cache_hit_rate"),
        ({"prompt_tokens": 10, "output_tokens": 10, "colour": "blue"}, "colour"),
        ({"prompt_tokens": {"histogram": [["big", 1]]}, "output_tokens": 10}, "prompt_tokens"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_bad_profiles_give_one_clear_error(data: object, message: str) -> None:
    with pytest.raises(WorkloadProfileError, match=message):
        parse_workload(data)


def test_bad_yaml_text() -> None:
    with pytest.raises(WorkloadProfileError, match="not valid YAML"):
        parse_workload_text("prompt_tokens: {p50: [")


def test_yaml_json_and_csv_files(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(CONTRACT_EXAMPLE)
    (tmp_path / "w.json").write_text(json.dumps({"prompt_tokens": 500, "output_tokens": 50}))
    (tmp_path / "w.csv").write_text(
        "# exported from our gateway logs\nkind,le,count\nprompt,128,40\nprompt,512,300\nprompt,+Inf,2\n"
        "output,64,120\noutput,256,220\n"
    )
    assert load_workload_file(tmp_path / "w.yaml").prompt_tokens == {"p50": 800, "p90": 3000, "p99": 12000}
    assert load_workload_file(tmp_path / "w.json", target_risk=0.05).target_risk == 0.05
    csv_profile = load_workload_file(tmp_path / "w.csv", prefix_cache_hit_rate=0.2)
    assert csv_profile.prefix_cache_hit_rate == 0.2
    assert csv_profile.output_distribution.cdf([64], cap=4096)[0] == pytest.approx(120 / 340)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("le,count\n1,2\n", "header must be"),
        ("kind,le,count\nprompt,128,x\noutput,1,1\n", "must be numbers"),
        ("kind,le,count\nresponse,128,1\n", "kind must be"),
        ("kind,le,count\nprompt,128,1\n", "no 'output' buckets"),
    ],
)
def test_bad_csv_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(WorkloadProfileError, match=message):
        load_workload_file(path)


def test_missing_file() -> None:
    with pytest.raises(WorkloadProfileError, match="no such file"):
        load_workload_file("/nonexistent/w.yaml")


PROMETHEUS_ANSWER = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            {"metric": {"le": "100.0"}, "value": [1700000000, "30"]},
            {"metric": {"le": "1000.0"}, "value": [1700000000, "90"]},
            {"metric": {"le": "+Inf"}, "value": [1700000000, "100"]},
        ],
    },
}


def test_prometheus_query_result_to_buckets_and_profile() -> None:
    buckets = buckets_from_prometheus_result(PROMETHEUS_ANSWER)
    assert buckets == [(100.0, 30.0), (1000.0, 90.0), (math.inf, 100.0)]
    profile = profile_from_histograms(buckets, buckets, target_risk=0.02)
    assert isinstance(profile, WorkloadProfile) and profile.target_risk == 0.02
    assert profile.prompt_distribution.cdf([1000], cap=2000)[0] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"status": "error", "error": "bad query"}, "Prometheus answered error"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "instant-vector"),
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, "no requests"),
        ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}, "'le' label"),
        ("{not json", "not JSON"),
    ],
)
def test_bad_prometheus_results(answer: object, message: str) -> None:
    with pytest.raises(WorkloadProfileError, match=message):
        buckets_from_prometheus_result(answer)
