"""Turning the CLI's names into specs: ``--gpu`` / ``--gpu-memory`` and ``--model``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.cli._output import err_console
from planner.errors import (
    HubUnavailableError,
    ModelNotFoundError,
    PlannerInputError,
    UnknownGPUError,
    UnknownModelError,
)
from planner.hub.progress import hub_progress
from planner.hub.resolve import resolve_model
from planner.models.catalog import lookup_model
from planner.models.spec import ModelSpec
from planner.units import parse_size

if TYPE_CHECKING:
    from planner.gpus.spec import GpuSpec


def gpu_for(name: str | None, memory: str | None) -> GpuSpec:
    """The catalog GPU, or an ad-hoc one for ``--gpu-memory SIZE`` (a card not in the catalog). With both,
    the catalog card's other facts are kept and only its memory is replaced."""
    # Imported here: `planner estimate` looks up models only, and the GPU catalog's classes cost it ~5%.
    from planner.gpus.catalog import gpu_from_memory, lookup_gpu

    if memory is not None:
        size = parse_size(memory)
        if size < (1 << 30):
            raise PlannerInputError(f"--gpu-memory {memory}: {size:,} bytes is not a GPU; write a unit, e.g. 48GiB")
        if name:
            try:
                known = lookup_gpu(name, memory_bytes=size)
            except UnknownGPUError:
                err_console.print(
                    f"[yellow]note[/] {name!r} is not a catalog card: planning a card with {size / (1 << 30):.2f} GiB "
                    "(--gpu-memory) and generic facts."
                )
                return gpu_from_memory(size, name=name)
            if abs(known.memory_bytes - size) > 0.02 * known.memory_bytes:
                catalog_gib = known.memory_bytes / (1 << 30)
                err_console.print(
                    f"[yellow]note[/] --gpu-memory {memory} replaces {known.name}'s {catalog_gib:.2f} GiB; its other "
                    "facts come from the catalog."
                )
            return known.model_copy(update={"memory_bytes": size, "memory_source": f"--gpu-memory {memory}"})
        return gpu_from_memory(size, name="custom")
    if not name:
        raise PlannerInputError(
            "--gpu is required (a catalog name such as A100-80GB, or --gpu-memory SIZE)", hint="See: planner gpus"
        )
    return lookup_gpu(name)


@dataclass
class LoadedModel:
    spec: ModelSpec
    source: str
    warnings: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None  # config.json as read (None for a catalog entry)


def _catalog_suggestions(name: str) -> list[str]:
    try:
        lookup_model(name)
    except UnknownModelError as error:
        return error.suggestions
    return []


def model_for(name: str, *, revision: str | None, token: str | None, refresh: bool) -> LoadedModel:
    """Resolve a model the way vLLM names it: local path, catalog id or Hub repo id.

    A name the Hub does not know is an unknown model (exit 2, with the catalog's "did you mean"); a Hub
    that cannot be reached stays a resolution failure (exit 3) unless the catalog has a close match."""
    try:
        with hub_progress(err_console) as progress:
            resolved = resolve_model(name, revision=revision, token=token, refresh=refresh, progress=progress)
    except ModelNotFoundError as error:
        raise UnknownModelError(name, _catalog_suggestions(name), hint=error.message) from None
    except HubUnavailableError as error:
        suggestions = _catalog_suggestions(name)
        if suggestions:
            raise UnknownModelError(name, suggestions, hint=error.message) from None
        raise
    return LoadedModel(
        spec=resolved.spec, source=resolved.source, warnings=list(resolved.warnings), config=resolved.config
    )
