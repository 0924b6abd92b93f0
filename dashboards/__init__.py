"""Grafana dashboards and Prometheus rules of kv-planner, generated from one source.

``python -m dashboards.generate`` writes the dashboard JSON files and the rules file into this folder
and byte-identical copies into ``charts/files/`` (Helm cannot read files outside the chart).
``python -m dashboards.generate --check`` fails when a committed file differs from the generator.
``python -m dashboards.validate FILE...`` checks dashboard JSON against Grafana's dashboard schema.

Nothing here is imported by ``planner`` or ``admission``; it is a maintainer tool whose output ships.
"""
