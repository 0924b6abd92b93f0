"""kv-planner's cluster side: the admission webhook, the exporter and the retuner.

Imports `planner`, never the reverse (checked by tests/test_layering.py).
"""
