"""Derive a JSON Schema from a project's published CustomResourceDefinition, for the tests that check
kv-planner's patches against the CRD (tests/k8s/test_platform_schemas.py).

No registry package ships the KServe, KubeAI, KubeRay, AIBrix or Dynamo CRD schemas (the npm
``@kubernetes-models/*`` family covers neither), so the schema is taken from the CRD the project
publishes: ``spec.versions[name].schema.openAPIV3Schema``, descriptions dropped. The fields kv-planner
reads or writes (``--keep``, dotted paths, ``[]`` for list items, ``*`` for map values) keep their
full schema; every other property keeps only its type (Kubernetes prunes unknown fields rather than
rejecting them, so a typed stub checks as much as the API server's structural schema does there).

    python scripts/derive_crd_schema.py CRD.yaml --version v1 --source REPO@COMMIT:PATH \
        --keep spec.args --keep spec.resourceProfile > tests/k8s/crd_schemas/NAME.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

_TYPE_KEYS = ("type", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "anyOf")
_DROP = ("description", "x-kubernetes-validations", "default", "example")


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _clean(v) for k, v in node.items() if k not in _DROP}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def _full(node: Any) -> Any:
    """The whole subtree, descriptions dropped and defaulted fields no longer required."""
    if isinstance(node, list):
        return [_full(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _full(v) for k, v in node.items() if k not in _DROP}
    if isinstance(node.get("required"), list) and isinstance(node.get("properties"), dict):
        defaulted = {name for name, sub in node["properties"].items() if isinstance(sub, dict) and "default" in sub}
        out["required"] = [name for name in node["required"] if name not in defaulted]
    return out


def _stub(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _clean(node[k]) for k in _TYPE_KEYS if k in node}


def _prune(node: dict[str, Any], keep: list[list[str]]) -> dict[str, Any]:
    """``node`` with full subtrees at the ends of ``keep`` and typed stubs elsewhere."""
    if any(not path for path in keep):
        return _full(node)
    out = _stub(node)
    if "required" in node:
        # The API server applies defaults before validating: a required field with a default is
        # never missing there.
        defaulted = {name for name, sub in (node.get("properties") or {}).items() if "default" in sub}
        out["required"] = [name for name in node["required"] if name not in defaulted]
    heads: dict[str, list[list[str]]] = {}
    for path in keep:
        heads.setdefault(path[0], []).append(path[1:])
    properties = node.get("properties") or {}
    if properties:
        out["properties"] = {
            name: _prune(sub, heads[name]) if name in heads else _stub(sub) for name, sub in properties.items()
        }
    if "[]" in heads and isinstance(node.get("items"), dict):
        out["items"] = _prune(node["items"], heads["[]"])
    if "*" in heads and isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _prune(node["additionalProperties"], heads["*"])
    return out


def derive(crd: dict[str, Any], version: str, keep: list[str]) -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = entry["schema"]["openAPIV3Schema"]
            return _prune(schema, [path.split(".") for path in keep])
    raise SystemExit(f"version {version} not in the CRD")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("crd", type=Path)
    parser.add_argument("--version", required=True)
    parser.add_argument("--source", required=True, help="repository@commit:path of the CRD")
    parser.add_argument("--keep", action="append", default=[])
    options = parser.parse_args()
    documents = [d for d in yaml.safe_load_all(options.crd.read_text()) if isinstance(d, dict)]
    crd = next(d for d in documents if d.get("kind") == "CustomResourceDefinition")
    schema = derive(crd, options.version, options.keep)
    schema["$comment"] = f"derived by scripts/derive_crd_schema.py from {options.source} ({options.version})"
    json.dump(schema, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
