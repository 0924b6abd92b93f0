"""Check dashboard JSON against Grafana's dashboard schema, as grafana-foundation-sdk models it.

The SDK's models are generated (by Grafana's cog) from the schema Grafana itself ships (the dashboard
kind plus every core panel's and the Prometheus query's options), for one Grafana release. Validation:

1. decode the JSON with the SDK's ``Dashboard.from_json`` (panel options and queries are decoded by
   the panel plugin's and the datasource's own model);
2. check every decoded value against the type annotations of its model (types, enum values,
   literals, nested models);
3. encode the decoded dashboard again and require every field of the input to survive: a field the
   schema does not know is dropped by the SDK, and reported here.

``lint`` adds kv-planner's own rules (units and descriptions on every panel, the datasource
variable, unique ids). ``python -m dashboards.validate FILE...`` runs both and exits 1 on a problem.
"""

from __future__ import annotations

import enum
import functools
import json
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog import plugins as cogplugins
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

# The Grafana release whose schema the installed SDK was generated from, and its schemaVersion.
GRAFANA_SCHEMA_RELEASE = "11.6"
SCHEMA_VERSION = dm.Dashboard().schema_version

_SDK_MODELS = "grafana_foundation_sdk.models."


@functools.cache
def _register_plugins() -> None:
    # Without the registry, panel options and queries stay untyped dicts and escape validation.
    cogplugins.register_default_plugins()


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Type annotations of a model's constructor (its fields), resolved once per class."""
    if cls not in _HINTS:
        hints = typing.get_type_hints(vars(cls)["__init__"])
        hints.pop("return", None)
        _HINTS[cls] = hints
    return _HINTS[cls]


def _is_model(value: object) -> bool:
    return type(value).__module__.startswith(_SDK_MODELS) and not isinstance(value, enum.Enum)


def _check_model(obj: object, path: str, errors: list[str]) -> None:
    if isinstance(obj, cogruntime.UnknownDataquery):
        errors.append(f"{path}: query of an unknown datasource type (no schema to check it against)")
        return
    hints = _hints(type(obj))
    for attr, value in vars(obj).items():
        if attr in hints and value is not None:
            _check_value(value, hints[attr], f"{path}.{attr}", errors)


def _check_value(value: Any, hint: Any, path: str, errors: list[str]) -> None:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return
    if hint is object:
        # Untyped slots (panel options, field config "custom", override values): the SDK decodes
        # them into the panel plugin's model when it has one, which is checked in turn.
        if _is_model(value):
            _check_model(value, path, errors)
        return
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        attempts: list[list[str]] = []
        for alternative in args:
            if alternative is type(None):
                continue
            trial: list[str] = []
            _check_value(value, alternative, path, trial)
            if not trial:
                return
            attempts.append(trial)
        if not attempts:
            errors.append(f"{path}: unexpected null")
            return
        # Report the alternative that came closest (fewest problems): usually the intended one.
        fewest = attempts[0]
        for trial in attempts[1:]:
            if len(trial) < len(fewest):
                fewest = trial
        errors.extend(fewest)
        return
    if origin is typing.Literal:
        if value not in args:
            errors.append(f"{path}: {value!r} is not one of {list(args)}")
        return
    if origin is list:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check_value(item, args[0] if args else Any, f"{path}[{i}]", errors)
        return
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for key, item in value.items():
            _check_value(item, args[1] if len(args) == 2 else Any, f"{path}.{key}", errors)
        return
    if isinstance(hint, type):
        _check_class(value, hint, path, errors)
        return
    errors.append(f"{path}: cannot check against {hint!r}")


def _check_class(value: Any, hint: type, path: str, errors: list[str]) -> None:
    if issubclass(hint, enum.Enum):
        allowed = [member.value for member in hint]
        if not isinstance(value, hint) and value not in allowed:
            errors.append(f"{path}: {value!r} is not one of {allowed}")
        return
    if hint is bool:
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a boolean, got {value!r}")
        return
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path}: expected an integer, got {value!r}")
        return
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{path}: expected a number, got {value!r}")
        return
    if hint is str:
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {value!r}")
        return
    if issubclass(hint, cogvariants.Dataquery) or hint.__module__.startswith(_SDK_MODELS):
        if isinstance(value, dict) and hasattr(hint, "from_json"):
            # Some list fields (panel links, transformations) are left as raw dicts by the SDK's
            # decoder; decode them with their model here so they get the same checks.
            _check_raw(value, hint, path, errors)
            return
        if not isinstance(value, hint):
            errors.append(f"{path}: expected {hint.__name__}, got {type(value).__name__}")
            return
        _check_model(value, path, errors)
        return
    if not isinstance(value, hint):
        errors.append(f"{path}: expected {hint.__name__}, got {type(value).__name__}")


def _check_raw(value: dict[str, Any], hint: type, path: str, errors: list[str]) -> None:
    try:
        decoded = hint.from_json(value)  # type: ignore[attr-defined]
        encoded = json.loads(JSONEncoder().encode(decoded))
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        errors.append(f"{path}: not a valid {hint.__name__} ({type(exc).__name__}: {exc})")
        return
    _check_model(decoded, path, errors)
    _survives(value, encoded, path, errors)


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and float(a) == float(b)
    )


def _survives(original: Any, decoded: Any, path: str, errors: list[str]) -> None:
    """Every field of ``original`` must be present, with the same value, after decode + encode."""
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            errors.append(f"{path}: the schema does not read this object")
            return
        for key, value in original.items():
            if key not in decoded:
                errors.append(f"{path}.{key}: unknown field (not in the schema, Grafana ignores it)")
            else:
                _survives(value, decoded[key], f"{path}.{key}", errors)
    elif isinstance(original, list):
        if not isinstance(decoded, list) or len(decoded) != len(original):
            errors.append(f"{path}: the schema does not read this list")
            return
        for i, (a, b) in enumerate(zip(original, decoded, strict=True)):
            _survives(a, b, f"{path}[{i}]", errors)
    elif original != decoded and not _same_number(original, decoded):
        errors.append(f"{path}: value {original!r} is read as {decoded!r}")


def validate_dashboard(data: Any) -> list[str]:
    """Schema problems of one dashboard (JSON already parsed); an empty list means valid."""
    if not isinstance(data, dict):
        return ["$: a dashboard is a JSON object"]
    _register_plugins()
    try:
        decoded = dm.Dashboard.from_json(data)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        return [f"$: the schema cannot read this dashboard ({type(exc).__name__}: {exc})"]
    errors: list[str] = []
    _check_model(decoded, "$", errors)
    for i, panel in enumerate(decoded.panels or []):
        panel_type = getattr(panel, "type_val", "")
        if panel_type != "row" and cogruntime.panelcfg_config(panel_type) is None:
            errors.append(f"$.panels[{i}].type: {panel_type!r} is not a core Grafana panel type")
    try:
        encoded = json.loads(JSONEncoder().encode(decoded))
    except (TypeError, ValueError) as exc:
        return [*errors, f"$: the decoded dashboard cannot be encoded again ({exc})"]
    _survives(data, encoded, "$", errors)
    return errors


def _panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in data.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []) if panel.get("type") == "row" else [])
    return out


def lint(data: dict[str, Any]) -> list[str]:
    """kv-planner's own rules for its dashboards, for a dashboard the schema accepts."""
    errors: list[str] = []
    if data.get("schemaVersion") != SCHEMA_VERSION:
        errors.append(f"$.schemaVersion: expected {SCHEMA_VERSION} (Grafana {GRAFANA_SCHEMA_RELEASE} schema)")
    names = [v.get("name") for v in data.get("templating", {}).get("list", [])]
    for required in ("datasource", "namespace", "model", "pod"):
        if required not in names:
            errors.append(f"$.templating: template variable {required!r} is missing")
    seen: set[int] = set()
    for panel in _panels(data):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in seen:
            errors.append(f"{where}: duplicate id")
        seen.add(panel.get("id", -1))
        grid = panel.get("gridPos", {})
        if grid.get("x", 0) + grid.get("w", 0) > 24:
            errors.append(f"{where}: wider than the 24-column grid")
        if panel.get("type") == "row":
            continue
        if not panel.get("description"):
            errors.append(f"{where}: no description")
        if not panel.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            errors.append(f"{where}: no unit")
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"{where}: datasource is not the ${{datasource}} variable")
        targets = panel.get("targets", [])
        if not targets:
            errors.append(f"{where}: no query")
        for t in targets:
            if not t.get("expr") or not t.get("refId"):
                errors.append(f"{where}: query without expr or refId")
    return errors


def check_files(paths: Sequence[Path]) -> dict[Path, list[str]]:
    """Schema and lint problems per file (files without problems are left out)."""
    problems: dict[Path, list[str]] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems[path] = [f"cannot read JSON: {exc}"]
            continue
        # Lint only what the schema accepts (it relies on the schema's types).
        found = validate_dashboard(data) or lint(data)
        if found:
            problems[path] = found
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        sys.stderr.write("usage: python -m dashboards.validate DASHBOARD.json...\n")
        return 2
    problems = check_files(paths)
    for path, found in problems.items():
        for problem in found:
            sys.stderr.write(f"{path}: {problem}\n")
    for path in paths:
        if path not in problems:
            sys.stdout.write(f"{path}: valid (Grafana {GRAFANA_SCHEMA_RELEASE} dashboard schema)\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
