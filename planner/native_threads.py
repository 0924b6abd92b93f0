"""One thread for the native maths libraries in kv-planner's own processes.

numpy's OpenBLAS (and MKL or OpenMP builds) starts a thread per CPU the process may run on: in a pod that is
every core of the node, whatever the pod's CPU limit. After a parallel call those threads spin a while
waiting for more. kv-planner's arrays hold at most 2^18 entries (a context's token cells), where threads
gain little, and the spinning cost as much CPU as the work itself: on a 2-core machine the webhook's
decisions for profiled workloads took 25 ms of CPU per review against 15 ms of wall time
(``benchmarks/webhook_decisions.py``), CPU a pod's quota would charge and throttle. The variables take
effect only when set before numpy's first import, so the entry points (``planner``, ``python -m admission``)
call :func:`use_one_native_thread` first; a value the caller set wins.
"""

from __future__ import annotations

import os

NATIVE_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def use_one_native_thread() -> None:
    """Default every native thread-count variable to 1 (leaving any the environment already sets)."""
    for name in NATIVE_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
