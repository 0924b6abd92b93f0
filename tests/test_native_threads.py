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


def _threaded_blas() -> bool:
    """Whether numpy's BLAS is an OpenBLAS built for threads (numpy's wheels: MAX_THREADS=64)."""
    import numpy as np

    blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    configuration = str(blas.get("openblas configuration", ""))
    return "openblas" in str(blas.get("name", "")).lower() and "MAX_THREADS=1 " not in configuration + " "


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc (Linux)")
def test_the_probe_sees_blas_threads_when_nothing_limits_them() -> None:
    """The control of the test above: the same probe without an entry point counts more than one thread,
    so the count of one there is the entry point's doing and not a blind probe."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: BLAS starts no threads of its own, so the control has nothing to show")
    if not _threaded_blas():
        pytest.skip("this numpy's BLAS is not a threaded OpenBLAS: it starts no threads to count")
    control = _run("")
    assert control["env"] == dict.fromkeys(NATIVE_THREAD_VARIABLES)
    assert control["threads"] > 1


def test_a_setting_of_the_caller_wins() -> None:
    result = _run(_ADMISSION, OPENBLAS_NUM_THREADS="2")
    assert result["env"] == {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
