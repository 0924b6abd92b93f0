"""Imported once by the decision pool's fork server (pool._PRELOAD): importing it loads the planner, its
catalogs and flag tables (and the risk model's modules, with one profiled review) and fills
:data:`BACKEND`'s memos, so every worker forked afterwards starts warm.

:data:`BACKEND` is the planning backend the workers use by default (``worker.shared_backend``): its memos
of model specs and plans (the popular catalog models on common GPUs, filled here within a bounded time)
are inherited by every worker at fork, shared copy-on-write, instead of being rebuilt by each worker for
its first reviews. Nothing imports this module except the fork server and ``worker.shared_backend``.
"""

from __future__ import annotations

import gc

from admission.webhook.handler import Reviewer
from admission.webhook.worker import warm_popular, warm_profiles, warm_up
from planner.policy.planning import CoreBackend

BACKEND = CoreBackend()
_reviewer = Reviewer(backend=BACKEND)
warm_up(_reviewer)
warm_profiles(_reviewer)
warm_popular(_reviewer)
# Catalogs, imports and the memos now live for the process and its children: keep the collector off them,
# so the forked workers do not copy these pages when a collection touches their reference counts.
gc.collect()
gc.freeze()
