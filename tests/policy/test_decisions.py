"""Decisions (deny > mutate > warn > allow, skip) and their patches, with a predictable backend.

FakeBackend numbers used below (Qwen/Qwen2.5-7B-Instruct, 56 KiB/token, 16-token blocks):
L4 -> 5,358 blocks, the default 32,768-token context needs 2,048 (worst case 2 sequences);
A100-80GB -> 65,594 blocks; T4 -> the weights do not fit.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from planner.errors import KvPlannerError
from planner.policy.codes import MAX_MESSAGE, shorten
from planner.policy.decide import BLOCKS_ANNOTATION, PLAN_ANNOTATION, ObjectDecision, decide
from planner.policy.model import EffectivePolicy, Policy
from tests.policy.conftest import deployment
from tests.policy.fakes import FakeBackend

QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # 131,072-token default context
PROFILE = "{prompt_tokens: {p50: 800, p99: 12000}, output_tokens: {p50: 200, p99: 2000}}"


def _policy(action: str = "Enforce", mutation: str = "fill", **extra: Any) -> EffectivePolicy:
    return Policy(validation_action=action, mutation=mutation, **extra).for_namespace("ml")


def _decide(obj: dict[str, Any], backend: Any, **kw: Any) -> ObjectDecision:
    return decide(obj, policy=kw.pop("policy", _policy()), backend=backend, **kw)


def _args_after(obj: dict[str, Any], decision: ObjectDecision) -> list[str]:
    patched = jsonpatch.apply_patch(obj, decision.patch)
    return patched["spec"]["template"]["spec"]["containers"][0]["args"]


def _second_pass_is_empty(obj: dict[str, Any], decision: ObjectDecision, backend: Any, policy: Any) -> None:
    patched = jsonpatch.apply_patch(obj, decision.patch)
    again = decide(patched, policy=policy, backend=backend)
    assert again.patch == []


def test_non_vllm_and_opted_out_are_skipped(fake: FakeBackend) -> None:
    nginx = deployment(["--port", "80"], image="nginx:1.27")
    assert _decide(nginx, fake).decision == "skip"
    opted = deployment([QWEN], annotations={"kv-planner.io/skip": "true"})
    result = _decide(opted, fake)
    assert result.decision == "skip" and result.patch == [] and result.warnings == []


def test_fill_adds_limits_and_annotations(fake: FakeBackend) -> None:
    obj = deployment([QWEN])
    result = _decide(obj, fake)
    assert result.decision == "mutate"
    assert _args_after(obj, result) == [QWEN, "--max-model-len", "32768", "--gpu-memory-utilization", "0.9"]
    assert {"KVP020", "KVP022", "KVP011"} <= set(result.codes)
    annotations = jsonpatch.apply_patch(obj, result.patch)["spec"]["template"]["metadata"]["annotations"]
    assert annotations[BLOCKS_ANNOTATION] == "5358"
    plan = json.loads(annotations[PLAN_ANNOTATION])
    assert plan == {
        "v": 1,
        "model": QWEN,
        "gpu": "L4",
        "gpuCount": 1,
        "vllmVersion": "0.19.0",
        "numGpuBlocks": 5358,
        "numGpuBlocksLow": 5358,  # (the fake plans have no band)
        "blockSize": 16,
        "maxModelLen": 32768,
        "maxNumSeqs": 256,
        "kvCacheDtype": "bfloat16",
        "gpuMemoryUtilization": 0.9,
    }
    # Without a profile --max-num-seqs is never filled below vLLM's default (the worst case holds 2).
    assert "--max-num-seqs" not in _args_after(obj, result)
    assert "KVP011" in " ".join(result.warnings)  # DESIGN: without a profile, only a warning
    _second_pass_is_empty(obj, result, fake, _policy())


def test_fill_max_num_seqs_default_only_when_the_worst_case_fits(fake: FakeBackend) -> None:
    obj = deployment([QWEN, "--max-model-len", "2048"], gpu_product="NVIDIA-A100-SXM4-80GB")
    result = _decide(obj, fake)
    assert "--max-num-seqs" in _args_after(obj, result)
    assert _args_after(obj, result)[-2:] == ["--max-num-seqs", "256"]


def test_profile_fills_and_clamps_max_num_seqs(fake: FakeBackend) -> None:
    # L4: (5,358 - 1) x 0.9 // 125 blocks per 2,000-token request = 38 sequences.
    obj = deployment([QWEN], annotations={"kv-planner.io/workload": PROFILE})
    filled = _decide(obj, fake)
    assert _args_after(obj, filled)[-2:] == ["--max-num-seqs", "38"]
    given = deployment([QWEN, "--max-num-seqs", "512"], annotations={"kv-planner.io/workload": PROFILE})
    warned = _decide(given, fake)
    assert "KVP010" in warned.codes and "--max-num-seqs" not in _args_after(given, warned)[:1]
    assert _args_after(given, warned)[1:3] == ["--max-num-seqs", "512"]
    clamp = _policy(mutation="clamp")
    clamped = _decide(given, fake, policy=clamp)
    assert "KVP023" in clamped.codes and _args_after(given, clamped)[1:3] == ["--max-num-seqs", "38"]
    _second_pass_is_empty(given, clamped, fake, clamp)


def test_policy_profile_applies_without_annotation(fake: FakeBackend) -> None:
    policy = Policy(
        validation_action="Audit",
        workload=json.loads(
            json.dumps({"prompt_tokens": {"p50": 800, "p99": 12000}, "output_tokens": {"p50": 200, "p99": 2000}})
        ),
    ).for_namespace("ml")
    result = _decide(deployment([QWEN]), fake, policy=policy)
    assert "KVP021" in result.codes


def test_default_context_that_does_not_fit_is_filled_not_denied(fake: FakeBackend) -> None:
    obj = deployment([LLAMA])
    result = _decide(obj, fake)
    assert result.decision == "mutate" and "KVP020" in result.codes
    args = _args_after(obj, result)
    fitted = int(args[args.index("--max-model-len") + 1])
    assert fitted < 131072 and fitted % 1024 == 0
    _second_pass_is_empty(obj, result, fake, _policy())


def test_context_that_does_not_fit(fake: FakeBackend) -> None:
    obj = deployment([LLAMA, "--max-model-len", "131072"])
    denied = _decide(obj, fake, policy=_policy("Enforce", "fill"))
    assert denied.decision == "deny" and denied.patch == []
    assert denied.deny_reasons[0].startswith("KVP002 vllm: --max-model-len 131072: 8192 KV blocks > ")
    # The deny reason is whole, every fix included (issue 18: the cut part used to be the fix) ...
    assert denied.deny_reasons[0].endswith(
        "fix: --max-model-len 30720 or --kv-cache-dtype fp8 or --tensor-parallel-size 2"
    )
    (reason,) = [f for f in denied.findings if f.code == "KVP002"]
    assert reason.fix is not None and reason.fix.args == ["--max-model-len", "30720"]
    assert reason.fix.text == "--max-model-len 30720 or --kv-cache-dtype fp8 or --tensor-parallel-size 2"
    audit = _decide(obj, fake, policy=_policy("Audit", "fill"))
    # Audit lets it through with the same message, shortened only for the API server's warning limit;
    # nothing is filled into a workload that cannot start.
    assert audit.decision == "warn" and audit.patch == []
    assert audit.warnings == [shorten(r) for r in denied.deny_reasons]
    clamp = _decide(obj, fake, policy=_policy("Enforce", "clamp"))
    assert clamp.decision == "mutate" and "KVP024" in clamp.codes
    assert int(_args_after(obj, clamp)[2]) < 131072
    _second_pass_is_empty(obj, clamp, fake, _policy("Enforce", "clamp"))
    off = _decide(obj, fake, policy=_policy("Enforce", "off"))
    assert off.decision == "deny"
    audit_off = _decide(obj, fake, policy=_policy("Audit", "off"))
    assert audit_off.decision == "warn" and audit_off.patch == []


def test_weights_that_do_not_fit(fake: FakeBackend) -> None:
    obj = deployment([QWEN], gpu_product="Tesla-T4")
    denied = _decide(obj, fake)
    assert denied.decision == "deny" and denied.codes == ["KVP001"]
    assert denied.deny_reasons == [
        "KVP001 vllm: weights 14.2 GiB/GPU exceed 0.9 x 14.6 GiB (T4); fix: --kv-cache-dtype fp8 or "
        "--tensor-parallel-size 2"
    ]
    audit = _decide(obj, fake, policy=_policy("Audit"))
    assert audit.decision == "warn" and audit.patch == []


def test_tensor_parallel_vs_gpus(fake: FakeBackend) -> None:
    too_many = _decide(deployment([QWEN, "-tp", "2"], gpus=1), fake)
    assert too_many.decision == "deny" and "KVP003" in too_many.codes
    assert "TP 2 x PP 1 = 2 GPUs but the pod gets 1" in too_many.deny_reasons[0]
    audit = _decide(deployment([QWEN, "-tp", "2"], gpus=1), fake, policy=_policy("Audit"))
    assert audit.decision == "warn" and audit.patch == []  # nothing is filled into a pod that cannot start
    idle = _decide(deployment([QWEN, "--max-model-len", "4096"], gpus=2), fake, policy=_policy(mutation="off"))
    assert idle.decision == "warn" and "KVP004" in idle.codes
    assert idle.warnings[0] == "KVP004 vllm: the pod gets 2 GPUs, vLLM uses TP 1 x PP 1 = 1: 1 idle"
    assert [w.split()[0] for w in idle.warnings[1:]] == ["KVP011"]  # 256 sequences > the worst case
    missing = _decide(deployment([QWEN, "--max-model-len", "4096"], gpus=None), fake, policy=_policy(mutation="off"))
    assert "KVP005" in missing.codes and "KVP004" not in missing.codes


def test_shell_commands_are_never_patched(fake: FakeBackend) -> None:
    obj = deployment(None, command=["sh", "-c", f"exec vllm serve {QWEN}"])
    result = _decide(obj, fake)
    assert result.patch == [BLOCK for BLOCK in result.patch if "annotations" in BLOCK["path"]]
    assert any(
        w.startswith("KVP030 vllm: shell command not changed; add --max-model-len 32768") for w in result.warnings
    )


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        (deployment(["nobody/unknown-model"]), "KVP040"),
        (deployment([QWEN], gpu_product="NVIDIA-Future-9000"), "KVP042"),
        (deployment([QWEN], gpu_product=None), "KVP042"),
        (deployment([QWEN, "--max-num", "8"]), "KVP043"),
        (deployment([QWEN, "--max-num-seqs", "many"]), "KVP043"),
        (deployment([QWEN, "--config", "/etc/vllm/c.yaml"]), "KVP031"),
        (deployment(["$(MODEL)"]), "KVP032"),
        (deployment([QWEN, "--max-model-len", "999999"]), "KVP044"),
        (deployment([QWEN], annotations={"kv-planner.io/workload": "{prompt_tokens: 1}"}), "KVP045"),
    ],
)
def test_own_failures_allow_with_a_warning(obj: dict[str, Any], code: str) -> None:
    result = _decide(
        obj,
        FakeBackend(models={QWEN: FakeBackend().resolve_model(QWEN, timeout=None, offline=True, allow_local=False)}),
    )
    assert result.decision in ("warn", "mutate")
    assert code in result.codes
    assert all(len(w) <= MAX_MESSAGE for w in result.warnings)


def test_parse_errors_disable_mutation(fake: FakeBackend) -> None:
    result = _decide(deployment([QWEN, "--made-up"]), fake)
    assert "KVP043" in result.codes
    assert all("args" not in op["path"] for op in result.patch)


class _Broken(FakeBackend):
    def plan(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")


class _Refusing(FakeBackend):
    def resolve_model(self, name: str, **kwargs: Any) -> Any:
        raise KvPlannerError("unexpected")


def test_internal_errors_never_deny() -> None:
    broken = _decide(deployment([QWEN]), _Broken())
    assert broken.decision == "warn" and broken.codes == ["KVP049"] and broken.patch == []
    odd = _decide(deployment([QWEN]), _Refusing())
    assert odd.decision == "warn" and odd.patch == []


def test_mutation_off_writes_nothing(fake: FakeBackend) -> None:
    result = _decide(deployment([QWEN, "--max-model-len", "4096"]), fake, policy=_policy("Audit", "off"))
    assert result.patch == [] and result.decision in ("allow", "warn")


def test_annotation_only_when_limits_are_all_given(fake: FakeBackend) -> None:
    obj = deployment(
        [QWEN, "--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "8"],
        template_annotations={"existing/key": "kept", "a~b/c": "x"},
    )
    result = _decide(obj, fake)
    assert result.patch == [
        {
            "op": "add",
            "path": "/spec/template/metadata/annotations/kv-planner.io~1planned-num-gpu-blocks",
            "value": "5358",
        }
    ]
    assert result.decision == "mutate" and result.warnings == []
    _second_pass_is_empty(obj, result, fake, _policy())


def test_missing_template_metadata_is_created(fake: FakeBackend) -> None:
    obj = deployment([QWEN, "--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "8"])
    del obj["spec"]["template"]["metadata"]
    result = _decide(obj, fake)
    assert result.patch == [
        {"op": "add", "path": "/spec/template/metadata", "value": {"annotations": {BLOCKS_ANNOTATION: "5358"}}}
    ]


def test_sidecars_and_several_vllm_containers(fake: FakeBackend) -> None:
    sidecar = {"name": "proxy", "image": "envoyproxy/envoy:v1.31", "args": ["-c", "/etc/envoy.yaml"]}
    second = {
        "name": "vllm-2",
        "image": "vllm/vllm-openai:v0.19.0",
        "args": [QWEN],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    obj = deployment([QWEN], extra_containers=[sidecar, second])
    obj["spec"]["template"]["spec"]["containers"].insert(0, obj["spec"]["template"]["spec"]["containers"].pop(1))
    result = _decide(obj, fake)
    paths = [op["path"] for op in result.patch]
    assert all(not p.startswith("/spec/template/spec/containers/0/") for p in paths)  # the sidecar is untouched
    assert any(p.startswith("/spec/template/spec/containers/1/args") for p in paths)
    assert any(p.startswith("/spec/template/spec/containers/2/args") for p in paths)
    assert sum(1 for p in paths if "annotations" in p) == 1
    assert "KVP033" in result.codes
    _second_pass_is_empty(obj, result, fake, _policy())


def test_namespace_notes_are_warnings(fake: FakeBackend) -> None:
    policy = Policy().for_namespace("ml", {"annotations": {"kv-planner.io/mutation": "always"}})
    result = decide(deployment([QWEN, "--max-model-len", "4096"]), policy=policy, backend=fake)
    assert "KVP046" in result.codes


def test_update_of_an_already_mutated_object_is_stable(fake: FakeBackend) -> None:
    obj = deployment([QWEN])
    first = _decide(obj, fake)
    mutated = jsonpatch.apply_patch(obj, first.patch)
    mutated["spec"]["replicas"] = 3  # an unrelated UPDATE
    assert _decide(mutated, fake).patch == []


def test_messages_stay_short(fake: FakeBackend) -> None:
    long_name = "x" * 200
    obj = deployment([LLAMA, "--max-model-len", "131072"])
    obj["spec"]["template"]["spec"]["containers"][0]["name"] = long_name
    result = _decide(obj, fake, policy=_policy("Audit"))
    assert result.warnings and all(len(w) <= MAX_MESSAGE for w in result.warnings)
