"""Loading and validating the embedded GPU catalog files (``planner/gpus/data/*.yaml``).

The YAML is written for people: memory in MiB (or GiB, as logs print it), bandwidth in GB/s. This
module turns it into :class:`~planner.gpus.spec.GpuSpec` objects and builds the lookup index, failing
loudly (:class:`~planner.errors.CatalogDataError`) on anything inconsistent: a missing source, two
GPUs claiming one alias, an instance type naming an unknown GPU.
"""

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.datafiles import read_yaml
from planner.errors import CatalogDataError
from planner.gpus.spec import GpuSpec, MigProfile

DATA_DIR = Path(__file__).parent / "data"
MiB = 1 << 20
GB_S = 10**9


def normalize(name: str) -> str:
    """The lookup key of a GPU name: lower case without spaces, ``-`` and ``_`` (dots are kept)."""
    # No regular expression: names come from manifests (split() drops every kind of whitespace).
    return "".join(name.lower().split()).replace("-", "").replace("_", "")


def gib_to_bytes(gib: float) -> int:
    """A GiB figure printed with two decimals, as whole MiB (the unit drivers allocate in)."""
    return round(gib * 1024) * MiB


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _MigEntry(_Strict):
    name: str = Field(pattern=r"^\d+g\.\d+gb(\+me)?$")
    memory_gib: float = Field(gt=0)
    compute_fraction: float = Field(gt=0, le=1)


class _GpuEntry(_Strict):
    """One GPU as written in gpus.yaml."""

    name: str = Field(pattern=r"^[A-Z0-9][A-Za-z0-9\-]*$")
    vendor: Literal["nvidia", "amd"]
    memory_mib: int | None = Field(default=None, gt=0)
    memory_gib: float | None = Field(default=None, gt=0)
    memory_source: str = Field(min_length=10)
    bandwidth_gb_s: int = Field(gt=0)
    architecture: str
    compute_capability: str | None = None
    form_factor: str | None = None
    nvlink: bool = False
    nvswitch_multicast: bool = False
    fp8: bool = False
    aliases: list[str] = Field(default=[])
    mig_profiles: list[_MigEntry] = Field(default=[])
    mig_source: str | None = None
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "_GpuEntry":
        if (self.memory_mib is None) == (self.memory_gib is None):
            raise ValueError("give exactly one of memory_mib and memory_gib")
        if self.mig_profiles and not self.mig_source:
            raise ValueError("MIG profiles need a mig_source")
        return self

    def to_spec(self) -> GpuSpec:
        memory = self.memory_mib * MiB if self.memory_mib is not None else gib_to_bytes(self.memory_gib or 0.0)
        migs = [
            MigProfile(
                name=m.name,
                memory_bytes=gib_to_bytes(m.memory_gib),
                compute_fraction=m.compute_fraction,
                memory_source=self.mig_source,
            )
            for m in self.mig_profiles
        ]
        return GpuSpec(
            name=self.name,
            vendor=self.vendor,
            memory_bytes=memory,
            memory_source=self.memory_source,
            bandwidth_bytes_per_s=self.bandwidth_gb_s * GB_S,
            architecture=self.architecture,
            compute_capability=self.compute_capability,
            form_factor=self.form_factor,
            nvlink=self.nvlink,
            nvswitch_multicast=self.nvswitch_multicast,
            fp8=self.fp8,
            aliases=list(self.aliases),
            mig_profiles=migs,
            notes=self.notes,
        )


class _GpuFile(_Strict):
    gpus: list[_GpuEntry] = Field(min_length=1)
    ambiguous: dict[str, list[str]] = Field(default={})


class InstanceType(_Strict):
    """A cloud instance type and the GPUs it carries."""

    name: str
    provider: Literal["aws", "gcp", "azure"]
    gpu: str = Field(description="canonical catalog GPU name")
    count: int = Field(ge=1, description="GPUs per instance")


class _InstanceEntry(_Strict):
    gpu: str
    count: int = Field(ge=1)


class _InstanceFile(_Strict):
    instance_types: dict[Literal["aws", "gcp", "azure"], dict[str, _InstanceEntry]]


def instance_key(name: str) -> str:
    """Lookup key of an instance type: Azure's ``Standard_`` prefix is optional."""
    key = normalize(name)
    return key[len("standard") :] if key.startswith("standard") else key


@dataclass
class Catalog:
    """The loaded catalog and its lookup tables (keys are :func:`normalize`-d)."""

    gpus: list[GpuSpec]
    by_key: dict[str, GpuSpec] = field(default_factory=dict)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)
    instances: dict[str, InstanceType] = field(default_factory=dict)

    def by_name(self, name: str) -> GpuSpec:
        return self.by_key[normalize(name)]


def _validate(model: type[_GpuFile] | type[_InstanceFile], path: Path) -> Any:
    # Through the folder's JSON snapshot (planner.datafiles): parsing the YAML dominated a cold run.
    data = read_yaml(path, what="GPU catalog")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise CatalogDataError(f"GPU catalog {path.name} does not validate:\n{error}") from error


def build_catalog(gpu_file: Path, instance_file: Path) -> Catalog:
    """Load both files and build the index; any inconsistency raises :class:`CatalogDataError`."""
    gpu_data: _GpuFile = _validate(_GpuFile, gpu_file)
    instance_data: _InstanceFile = _validate(_InstanceFile, instance_file)
    catalog = Catalog(gpus=[entry.to_spec() for entry in gpu_data.gpus])
    owner: dict[str, str] = {}
    for spec in catalog.gpus:
        for spelling in (spec.name, *spec.aliases):
            key = normalize(spelling)
            if key in owner and owner[key] != spec.name:
                raise CatalogDataError(f"GPU catalog: {spelling!r} names both {owner[key]} and {spec.name}")
            owner[key] = spec.name
            catalog.by_key[key] = spec
        names = [profile.name for profile in spec.mig_profiles]
        if len(set(names)) != len(names):
            raise CatalogDataError(f"GPU catalog: {spec.name} lists a MIG profile twice")
    for word, candidates in gpu_data.ambiguous.items():
        key = normalize(word)
        if key in owner:
            raise CatalogDataError(f"GPU catalog: ambiguous name {word!r} is also an alias of {owner[key]}")
        unknown = [c for c in candidates if normalize(c) not in catalog.by_key]
        if unknown or len(candidates) < 2:
            raise CatalogDataError(f"GPU catalog: ambiguous name {word!r} needs two known GPUs, got {candidates}")
        catalog.ambiguous[key] = [catalog.by_name(c).name for c in candidates]
    for provider, table in instance_data.instance_types.items():
        for name, entry in table.items():
            key = instance_key(name)
            if normalize(entry.gpu) not in catalog.by_key:
                raise CatalogDataError(f"instance type {name}: unknown GPU {entry.gpu!r}")
            if key in catalog.instances or key in owner:
                raise CatalogDataError(f"instance type {name} collides with another name in the catalog")
            catalog.instances[key] = InstanceType(
                name=name, provider=provider, gpu=catalog.by_name(entry.gpu).name, count=entry.count
            )
    return catalog


@functools.cache
def load_catalog() -> Catalog:
    """The embedded catalog, read once per process."""
    return build_catalog(DATA_DIR / "gpus.yaml", DATA_DIR / "instance_types.yaml")
