"""``--kv-cache-memory-bytes`` that the card cannot hold beside the weights cannot start (KVP009): vLLM takes
the given size without profiling and runs out of memory allocating it; kv-planner allowed it as fitting."""

from __future__ import annotations

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend
from tests.policy.conftest import deployment

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})


def _deployment(kv_bytes: str) -> str:
    args = ["meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-memory-bytes", kv_bytes, "--max-model-len", "8192"]
    return yaml.safe_dump(deployment(args, gpu_product=None, annotations={"kv-planner.io/gpu": "A100-80GB"}))


@pytest.mark.parametrize(("given", "decision", "code"), [("100G", "deny", "KVP009"), ("1000T", "deny", "KVP009")])
def test_a_given_cache_past_the_card_is_denied(given: str, decision: str, code: str) -> None:
    (entry,) = run_check(read_documents(_deployment(given), "t.yaml"), policy=POLICY, backend=CoreBackend()).workloads
    assert entry.decision == decision and code in entry.codes
    assert entry.patch is None or all("max-num-seqs" not in str(op) for op in entry.patch)


def test_a_given_cache_that_fits_is_not_denied() -> None:
    (entry,) = run_check(read_documents(_deployment("40G"), "t.yaml"), policy=POLICY, backend=CoreBackend()).workloads
    assert entry.decision != "deny" and "KVP009" not in entry.codes


def test_a_deny_names_the_term_that_leaves_no_kv_cache() -> None:
    # 15 GiB of weights fit in 71 GiB: what leaves nothing is the activation of a 1T-token batch.
    text = _deployment("40G").replace("--kv-cache-memory-bytes", "--max-num-batched-tokens").replace("40G", "1T")
    (entry,) = run_check(read_documents(text, "t.yaml"), policy=POLICY, backend=CoreBackend()).workloads
    assert entry.decision == "deny" and entry.codes[0] == "KVP001"
    assert "activation peak" in entry.messages[0] and "exceed" not in entry.messages[0]
