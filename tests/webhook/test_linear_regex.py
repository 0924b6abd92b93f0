"""Every pattern that sees manifest text runs in linear time (google-re2, or no regex at all).

Before: a ``kv-planner.io/gpu`` annotation or node selector of ~12,000 ``-`` froze the webhook for seconds
(catastrophic backtracking in GPU-name matching) and 200 KB froze it for minutes. These inputs run under a
pytest timeout far above what a linear scan takes, so a backtracking pattern fails the test by timing
out; and a source scan keeps Python's backtracking ``re`` out of the modules that read manifests.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.errors import KvPlannerError
from planner.gpus._data import normalize
from planner.gpus.catalog import lookup_gpu
from planner.k8s.images import image_release
from planner.k8s.quantity import quantity_bytes
from planner.k8s.sharing import mps_limit_bytes
from planner.vllm.launchers import split_string, unwrap
from planner.vllm.releases import Version

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
# Modules that read manifest (or admission request) text.
UNTRUSTED_INPUT = [
    *sorted((ROOT / "planner" / "k8s").rglob("*.py")),
    *sorted((ROOT / "planner" / "gpus").rglob("*.py")),
    *sorted((ROOT / "planner" / "policy").rglob("*.py")),
    ROOT / "planner" / "vllm" / "argv.py",
    ROOT / "planner" / "vllm" / "launchers.py",
    ROOT / "planner" / "vllm" / "releases.py",
    ROOT / "planner" / "hub" / "resolve.py",
    ROOT / "planner" / "hub" / "local.py",
    *sorted((ROOT / "admission" / "webhook").rglob("*.py")),
]
HOSTILE = ["-" * 200_000, " " * 200_000 + "x", "_-" * 100_000 + "3g.40gb!", "a" * 200_000 + "/", "1" * 200_000 + "x"]


def test_no_backtracking_regex_in_modules_that_read_manifests() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in UNTRUSTED_INPUT
        if re.search(
            r"^import re$|^from re import|\bre\.(compile|match|search|fullmatch|sub|findall|finditer|split)\(",
            path.read_text(),
            re.M,
        )
    ]
    assert offenders == [], "use re2 (linear time) for patterns that see manifest text"


@pytest.mark.parametrize("text", HOSTILE, ids=["dashes", "spaces", "mig-like", "letters", "digits"])
def test_gpu_names(text: str) -> None:
    normalize(text)
    with pytest.raises(KvPlannerError):
        lookup_gpu(text)


@pytest.mark.parametrize("text", HOSTILE, ids=["dashes", "spaces", "mig-like", "letters", "digits"])
def test_image_tags_quantities_and_versions(text: str) -> None:
    image_release(f"vllm/vllm-openai:v0.9.0-rocm{text}")
    image_release(f"rocm/vllm:vllm_v{text}")
    assert quantity_bytes(text) is None
    mps_limit_bytes(text)
    with pytest.raises(KvPlannerError):
        Version.parse("1." + text)


@pytest.mark.parametrize("text", HOSTILE, ids=["dashes", "spaces", "mig-like", "letters", "digits"])
def test_launcher_targets_and_split_strings(text: str) -> None:
    unwrap(["uvx", f"vllm[{text}]@{text}", "serve"])
    unwrap(["env", "-S", text, "vllm", "serve"])
    split_string(text)
