"""Imported once by the decision pool's fork server (pool._PRELOAD): importing it loads the planner, its
catalogs and flag tables by answering one review, so every worker forked afterwards starts warm.

Its only job is that side effect; nothing imports it except the fork server.
"""

from __future__ import annotations

import gc

from admission.webhook.handler import Reviewer
from admission.webhook.worker import warm_up
from planner.policy.planning import CoreBackend

warm_up(Reviewer(backend=CoreBackend()))
# Catalogs and imports now live for the process and its children: keep the collector off them, so the
# forked workers do not copy these pages when a collection touches their reference counts.
gc.collect()
gc.freeze()
