"""The policy file: schema, defaults, namespace overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PolicyError
from planner.policy.model import Policy, load_policy, parse_policy

PROFILE = {"prompt_tokens": {"p50": 800, "p99": 12000}, "output_tokens": {"p50": 200, "p99": 2000}}


def test_defaults_are_the_charts() -> None:
    policy = Policy()
    assert (policy.validation_action, policy.mutation, policy.headroom) == ("Audit", "fill", 0.1)
    assert policy.model_lookup.timeout_seconds == 0.5


def test_camel_case_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "validationAction: Enforce\nmutation: clamp\nheadroom: 0.2\ndefaultGpu: L4\nvllmVersion: 0.19.0\n"
        "modelLookup: {timeoutSeconds: 1.5, offline: true}\n"
        "namespaces: {team-a: {mutation: 'off'}}\n"
    )
    policy = load_policy(path)
    assert policy.validation_action == "Enforce" and policy.mutation == "clamp" and policy.default_gpu == "L4"
    assert policy.model_lookup.offline and policy.namespaces["team-a"].mutation == "off"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"validationaction": "Enforce"}, "Extra inputs"),
        ({"mutation": "always"}, "mutation"),
        ({"headroom": 1.0}, "headroom"),
        ({"workload": {"prompt_tokens": {"p50": 10}}}, "output_tokens"),
        ({"namespaces": {"a": {"bogus": 1}}}, "bogus"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_invalid_policies_name_the_problem(data: object, fragment: str) -> None:
    with pytest.raises(PolicyError, match=fragment):
        parse_policy(data)


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("mutation: [fill\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad)


def test_namespace_precedence_file_entry_then_namespace_metadata() -> None:
    policy = parse_policy(
        {"validationAction": "Audit", "namespaces": {"a": {"validationAction": "Enforce", "headroom": 0.3}}}
    )
    assert policy.for_namespace("a").validation_action == "Enforce"
    assert policy.for_namespace("b").validation_action == "Audit"
    meta = {
        "labels": {"kv-planner.io/mutation": "clamp"},
        "annotations": {
            "kv-planner.io/validation-action": "audit",
            "kv-planner.io/headroom": "0.25",
            "kv-planner.io/workload": "{prompt_tokens: {p50: 800, p99: 12000}, output_tokens: {p50: 200, p99: 2000}}",
        },
    }
    effective = policy.for_namespace("a", meta)
    assert (effective.validation_action, effective.mutation, effective.headroom) == ("Audit", "clamp", 0.25)
    assert effective.workload == PROFILE and effective.notes == []


def test_bad_namespace_values_are_ignored_with_notes() -> None:
    meta = {
        "annotations": {
            "kv-planner.io/mutation": "sometimes",
            "kv-planner.io/headroom": "2",
            "kv-planner.io/workload": "{prompt_tokens: 3}",
        }
    }
    effective = Policy().for_namespace("x", meta)
    assert effective.mutation == "fill" and effective.headroom == 0.1 and effective.workload is None
    assert len(effective.notes) == 3 and all(len(n) < 120 for n in effective.notes)
