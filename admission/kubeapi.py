"""The few kubernetes-client entry points the exporter, retuner and webhook use, behind typed functions.

The kubernetes package is untyped; its objects are handled as ``Any`` here and nowhere else.
"""

from __future__ import annotations

import importlib
from typing import Any


def _module(name: str) -> Any:
    return importlib.import_module(name)


def to_dict(obj: Any) -> dict[str, Any]:
    """A kubernetes model object -> the API's JSON shape (camelCase keys); dicts pass through."""
    if isinstance(obj, dict):
        return obj
    data: dict[str, Any] = _module("kubernetes.client").ApiClient().sanitize_for_serialization(obj)
    return data


def new_watch() -> Any:
    return _module("kubernetes.watch").Watch()


def load_config(kubeconfig: str | None = None) -> None:
    """In-cluster service account first, else the kubeconfig file."""
    config = _module("kubernetes.config")
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig)


def core_api(api_client: Any = None) -> Any:
    """CoreV1Api on the loaded configuration, or on ``api_client`` (tests point one at a fake server)."""
    return _module("kubernetes.client").CoreV1Api(api_client)


def apps_api() -> Any:
    return _module("kubernetes.client").AppsV1Api()
