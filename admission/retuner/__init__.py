"""The retuner: observed KV pressure and request lengths -> a recommended ``--max-num-seqs`` per workload.

Runs inside the exporter process (``python -m admission exporter --retune recommend|apply``).
"""

from __future__ import annotations

from admission.retuner.decide import Decision, WorkloadSignals, WorkloadState, decide
from admission.retuner.retuner import Retuner
from admission.retuner.settings import RetunerSettings

__all__ = ["Decision", "Retuner", "RetunerSettings", "WorkloadSignals", "WorkloadState", "decide"]
