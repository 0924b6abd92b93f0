from __future__ import annotations

from hypothesis import settings

# Property tests run derandomized and without a deadline (DESIGN.md: deterministic CI on shared cores).
settings.register_profile("kv-planner", derandomize=True, deadline=None, max_examples=150)
settings.load_profile("kv-planner")
