"""kv-planner's processes run numpy's native maths on one thread (planner/native_threads.py): BLAS threads
on a node's every core spun as much CPU as the webhook's decisions used."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.native_threads import NATIVE_THREAD_VARIABLES

_PROBE = """
import json, os
{entry}
import numpy as np
a = np.random.default_rng(0).random(400_000)
for _ in range(20):
    np.dot(a, a)  # long enough for OpenBLAS to split it over its threads, when it has several
tasks = "/proc/self/task"
print(json.dumps({{"threads": len(os.listdir(tasks)) if os.path.isdir(tasks) else -1,
                  "env": {{k: os.environ.get(k) for k in {names!r}}}}}))
"""


def _run(entry: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in NATIVE_THREAD_VARIABLES}
    code = _PROBE.format(entry=entry, names=NATIVE_THREAD_VARIABLES)
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


_ADMISSION = "import admission.__main__"  # what `python -m admission` runs before its commands
_PLANNER = "from unittest import mock\nimport planner.cli\nwith mock.patch('planner.cli.app'):\n    planner.cli.main()"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc (Linux)")
@pytest.mark.parametrize("entry", [_ADMISSION, _PLANNER], ids=["python -m admission", "planner"])
def test_the_entry_points_run_numpy_on_one_thread(entry: str) -> None:
    result = _run(entry)
    assert result["env"] == dict.fromkeys(NATIVE_THREAD_VARIABLES, "1")
    assert result["threads"] == 1
    if len(os.sched_getaffinity(0)) > 1:
        # The control: on a machine with several cores, numpy without the entry point starts more.
        control = _run("")
        assert control["threads"] > 1 and control["env"] == dict.fromkeys(NATIVE_THREAD_VARIABLES)


def test_a_setting_of_the_caller_wins() -> None:
    result = _run(_ADMISSION, OPENBLAS_NUM_THREADS="2")
    assert result["env"] == {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
