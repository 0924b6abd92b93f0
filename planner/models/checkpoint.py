"""Exact weight bytes of a safetensors checkpoint, read from the headers only.

A safetensors file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON
(``{name: {"dtype", "shape", "data_offsets": [start, end]}, "__metadata__": {...}}``) and the tensor
data. Everything the planner needs (bytes and element counts per dtype) is in the JSON, so this module
reads ``8 + N`` bytes of each file and never touches tensor data. The Hub path gets the same JSON
through ``huggingface_hub``'s safetensors metadata API (HTTP range requests) and feeds it to
:func:`summarize_checkpoint`.

Which files count follows vLLM's loader (vllm 0.19.0 model_executor/model_loader/default_loader.py:
``DefaultModelLoader._prepare_weights``): Mistral-format ``consolidated*.safetensors`` win when present,
otherwise every top-level ``*.safetensors``; an index file (``model.safetensors.index.json`` /
``consolidated.safetensors.index.json``) then drops files it does not list
(weight_utils.py: ``filter_duplicate_safetensors_files``).

Packed 4-bit formats store several weights per element (AWQ/GPTQ ``qweight`` and compressed-tensors
``weight_packed`` in int32, MXFP4 ``*_blocks`` and NVFP4/bitsandbytes ``weight`` in uint8). Their bytes
are exact as stored; :attr:`CheckpointInfo.logical_parameters` unpacks them to the model's weight count
and leaves scales, zero points and group indices out (they are :attr:`CheckpointInfo.quantization_bytes`).
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ModelNotFoundError, ModelResolutionError

SAFETENSORS_INDEX = "model.safetensors.index.json"
CONSOLIDATED_INDEX = "consolidated.safetensors.index.json"

# Bits per element of every dtype the safetensors format defines (safetensors 0.8 Rust ``Dtype``).
# F4/F6 are sub-byte: their header shapes count logical elements, so bytes = elements * bits / 8.
DTYPE_BITS: Mapping[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}  # fmt: skip

# The safetensors library refuses headers above 100 MB; a larger length means a corrupt file.
_MAX_HEADER_BYTES = 100_000_000

# Tensors that describe quantized weights instead of being weights: scales (per channel, group or
# tensor; FP8 ``weight_scale_inv``, NVFP4 ``weight_scale_2``, KV ``k_scale``), zero points, GPTQ act-order
# indices, compressed-tensors ``weight_shape`` and bitsandbytes quant state.
_AUX_SUFFIXES = (
    "_scale", "_scale_inv", "_scale_2", ".scales", "_scales", ".qzeros", ".g_idx", "_g_idx",
    "_zero_point", ".weight_shape", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
    "_global_scale",
)  # fmt: skip
_AUX_INFIX = ".quant_state."

# Decoder layers of the text model, under the prefixes vLLM's weight loaders accept.
_TEXT_LAYER = re.compile(r"^(?:model\.(?:language_model\.)?|language_model\.(?:model\.)?)?layers\.(\d+)\.")
_MTP_NAME = re.compile(r"(?:^|\.)mtp(?:_layers)?\.")


class TensorMeta(NamedTuple):
    """One tensor of a safetensors header."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    """The parsed JSON header of one safetensors file (from disk or from the Hub)."""

    filename: str
    tensors: Mapping[str, TensorMeta]
    header_bytes: int | None = None  # N, the JSON length; None when unknown (Hub metadata API)
    file_bytes: int | None = None  # size on disk, when read locally


class DtypeTotal(BaseModel):
    """Elements and bytes stored in one safetensors dtype."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parameters: int = Field(ge=0, description="elements stored in this dtype (packed elements count once)")
    bytes: int = Field(ge=0)


class CheckpointFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    tensors: int = Field(ge=0)
    tensor_bytes: int = Field(ge=0, description="bytes of tensor data in this file")
    header_bytes: int | None = Field(default=None, description="length of the JSON header")


class CheckpointInfo(BaseModel):
    """What a checkpoint weighs, from its safetensors headers (exact) or from the architecture."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["safetensors", "safetensors-index", "estimate"]
    exact: bool = Field(description="total_bytes is the exact byte count of the weight tensors")
    total_bytes: int = Field(ge=0, description="bytes of all weight tensors vLLM loads from the files")
    parameters: int | None = Field(
        default=None, description="elements stored, summed over dtypes (as the Hub counts them)"
    )
    logical_parameters: int | None = Field(
        default=None, description="model weights: packed 4-bit elements unpacked, scales/zero points left out"
    )
    quantization_bytes: int = Field(default=0, ge=0, description="bytes of scales, zero points, group indices")
    mtp_bytes: int = Field(
        default=0, ge=0, description="bytes of multi-token-prediction layers (vLLM loads them only for MTP)"
    )
    dtypes: dict[str, DtypeTotal] = Field(default_factory=dict)
    files: list[CheckpointFile] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Reading headers


def parse_header_json(raw: bytes, *, filename: str) -> dict[str, TensorMeta]:
    """Parse the JSON header of a safetensors file into tensors (``__metadata__`` dropped)."""
    too_deep = False
    try:
        document = json.loads(raw.decode("utf-8"))
    except RecursionError:
        too_deep, document = True, None  # nested past json's recursion limit: refused below
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, an integer over 4300 digits
        raise ModelResolutionError(
            f"{filename} is not a safetensors file: its header is not JSON ({str(error)[:200]})."
        ) from None
    if too_deep or json_depth_exceeds(document):
        raise ModelResolutionError(
            f"{filename} is not a safetensors file: its header nests deeper than {MAX_JSON_DEPTH} levels."
        )
    if not isinstance(document, dict):
        raise ModelResolutionError(f"{filename} is not a safetensors file: its header is not a JSON object.")
    tensors: dict[str, TensorMeta] = {}
    for name, entry in document.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(v) for v in entry["data_offsets"])
            meta = TensorMeta(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), start, end)
        except (KeyError, TypeError, ValueError) as error:
            raise ModelResolutionError(
                f"{filename}: safetensors header entry {name!r} is malformed ({error!r})."
            ) from None
        tensors[name] = meta
    return tensors


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """Read only the 8-byte length and the JSON header of a local safetensors file."""
    try:
        file_bytes = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ModelResolutionError(f"{path} is not a safetensors file: it is only {len(prefix)} bytes.")
            (length,) = struct.unpack("<Q", prefix)
            if length > _MAX_HEADER_BYTES or 8 + length > file_bytes:
                raise ModelResolutionError(
                    f"{path} is not a safetensors file or is truncated: header length {length} "
                    f"does not fit in {file_bytes} bytes."
                )
            raw = handle.read(length)
    except OSError as error:
        if isinstance(error, ModelResolutionError):
            raise
        raise ModelResolutionError(f"Cannot read {path}: {error.strerror or error}.") from None
    tensors = parse_header_json(raw, filename=str(path))
    data_end = max((t.end for t in tensors.values()), default=0)
    if 8 + length + data_end > file_bytes:
        raise ModelResolutionError(
            f"{path} is truncated: its header describes {8 + length + data_end} bytes, the file has "
            f"{file_bytes} (an interrupted download or copy?)."
        )
    return SafetensorsHeader(path.name, tensors, header_bytes=length, file_bytes=file_bytes)


# --------------------------------------------------------------------------------------------------
# Which files vLLM loads


def select_weight_files(filenames: Collection[str]) -> tuple[list[str], str | None]:
    """The safetensors files vLLM would consider, and the index file that filters them (if present).

    ``filenames`` are the files of the model directory or repository, relative to its root.
    """
    top_level = [n for n in filenames if "/" not in n and not n.startswith(".")]
    consolidated = sorted(n for n in top_level if fnmatch(n, "consolidated*.safetensors"))
    if consolidated:
        index = CONSOLIDATED_INDEX
        candidates = consolidated
    else:
        index = SAFETENSORS_INDEX
        candidates = sorted(n for n in top_level if n.endswith(".safetensors"))
    return candidates, (index if index in top_level else None)


def filter_by_index(candidates: Sequence[str], index: Mapping[str, Any], *, where: str) -> list[str]:
    """Keep the files the index lists; every listed shard must be among the candidates."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelResolutionError(f"{where}: the safetensors index has no weight_map.")
    listed = {str(v) for v in weight_map.values()}
    missing = sorted(listed - set(candidates))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ModelNotFoundError(f"{where}: the safetensors index lists {shown}, which is missing.")
    return [c for c in candidates if c in listed]


def index_total_size(index: Mapping[str, Any]) -> int | None:
    """``metadata.total_size`` of an index: the exact tensor bytes, without a per-dtype split."""
    metadata = index.get("metadata")
    if isinstance(metadata, dict):
        total = metadata.get("total_size")
        if isinstance(total, (int, float)) and total >= 0:
            return int(total)
    return None


# Real config.json and index files nest 3-4 levels; anything deeper is not a model's file.
MAX_JSON_DEPTH = 64


def json_depth_exceeds(document: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a decoded JSON document nests deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def loads_untrusted_json(text: str | bytes, *, what: str) -> Any:
    """``json.loads`` for a file from an untrusted author: every way it fails is a :class:`ModelResolutionError`.

    Besides malformed JSON (``JSONDecodeError``), ``json`` raises ``ValueError`` for an integer of more than
    4300 digits and ``RecursionError`` for deep nesting (``[[[[...`` within the size cap), and a document it did
    decode may still nest deeper than any real file (:data:`MAX_JSON_DEPTH`), which would make later recursive
    code (``json.dumps``, ``copy.deepcopy``) fail instead.
    """
    try:
        document = json.loads(text)
    except RecursionError:
        raise ModelResolutionError(f"{what} is not valid JSON: it nests deeper than {MAX_JSON_DEPTH} levels.") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, an integer over 4300 digits
        raise ModelResolutionError(f"{what} is not valid JSON ({str(error)[:200]}).") from None
    if json_depth_exceeds(document):
        raise ModelResolutionError(f"{what} is not valid JSON: it nests deeper than {MAX_JSON_DEPTH} levels.")
    return document


def read_json_file(path: Path, *, what: str) -> dict[str, Any]:
    """Read a JSON object from disk, raising :class:`ModelResolutionError` with the path on failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ModelResolutionError(f"Cannot read {what} {path}: {error.strerror or error}.") from None
    except UnicodeDecodeError as error:
        raise ModelResolutionError(f"{what} {path} is not valid JSON ({error}).") from None
    document = loads_untrusted_json(text, what=f"{what} {path}")
    if not isinstance(document, dict):
        raise ModelResolutionError(f"{what} {path} is not a JSON object.")
    return document


def read_local_checkpoint(
    directory: Path, *, config: Mapping[str, Any] | None = None, num_layers: int | None = None
) -> CheckpointInfo | None:
    """Exact checkpoint bytes of a local model directory; None when it holds no safetensors files."""
    names = [p.name for p in directory.iterdir() if p.is_file()]
    candidates, index_name = select_weight_files(names)
    if not candidates:
        return None
    if index_name is not None:
        index = read_json_file(directory / index_name, what="safetensors index")
        candidates = filter_by_index(candidates, index, where=str(directory))
    headers = [read_safetensors_header(directory / name) for name in candidates]
    return summarize_checkpoint(headers, config=config, num_layers=num_layers)


# --------------------------------------------------------------------------------------------------
# Summing up


def quantization_config_of(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The quantization section of a config.json (top level, or inside ``text_config``)."""
    if not config:
        return {}
    for holder in (config, config.get("text_config")):
        if isinstance(holder, Mapping):
            for key in ("quantization_config", "compression_config"):
                section = holder.get(key)
                if isinstance(section, dict):
                    return section
    return {}


def packed_weight_bits(quantization: Mapping[str, Any]) -> int:
    """Bits per weight of a packed format, from ``quantization_config`` (4 when it does not say)."""
    for key in ("bits", "w_bit", "weight_bits"):
        value = quantization.get(key)
        if isinstance(value, int) and value > 0:
            return value
    method = str(quantization.get("quant_method", "")).lower()
    if method == "bitsandbytes":
        return 4 if quantization.get("load_in_4bit") else 8
    if method == "compressed-tensors":
        groups = quantization.get("config_groups")
        if isinstance(groups, dict):
            for group in groups.values():
                weights = group.get("weights") if isinstance(group, dict) else None
                if isinstance(weights, dict) and isinstance(weights.get("num_bits"), int):
                    return int(weights["num_bits"])
    if method.startswith("modelopt"):
        inner = quantization.get("quantization")
        nested = inner.get("quant_algo") if isinstance(inner, dict) else None
        algo = str(quantization.get("quant_algo") or nested or "").upper()
        if "FP8" in algo and "FP4" not in algo and "W4" not in algo:
            return 8
    return 4


def _is_aux(name: str) -> bool:
    return name.endswith(_AUX_SUFFIXES) or _AUX_INFIX in name


def _pack_factor(name: str, meta: TensorMeta, bits: int) -> Fraction:
    """Weights stored per element: 8 per int32 for 4-bit AWQ/GPTQ, 2 per uint8 for MXFP4/NVFP4."""
    dtype_bits = DTYPE_BITS.get(meta.dtype)
    if dtype_bits is None or dtype_bits <= bits:
        return Fraction(1)
    packed = (
        name.endswith((".qweight", ".weight_packed"))
        or (name.endswith("_blocks") and meta.dtype == "U8")
        or (name.endswith(".weight") and meta.dtype == "U8" and bits == 4)
    )
    return Fraction(dtype_bits, bits) if packed else Fraction(1)


def _is_mtp(name: str, num_layers: int | None) -> bool:
    if _MTP_NAME.search(name):
        return True
    if num_layers is None:
        return False
    match = _TEXT_LAYER.match(name)
    return match is not None and int(match.group(1)) >= num_layers


def summarize_checkpoint(
    headers: Iterable[SafetensorsHeader],
    *,
    config: Mapping[str, Any] | None = None,
    num_layers: int | None = None,
) -> CheckpointInfo:
    """Exact bytes and elements per dtype of the given files (``config`` gives the packing)."""
    quantization = quantization_config_of(config)
    bits = packed_weight_bits(quantization) if quantization else 4
    elements: dict[str, int] = {}
    byte_totals: dict[str, int] = {}
    logical = Fraction(0)
    aux_bytes = 0
    mtp_bytes = 0
    files: list[CheckpointFile] = []
    for header in headers:
        file_bytes = 0
        for name, meta in header.tensors.items():
            nbytes = meta.end - meta.start
            count = math.prod(meta.shape)
            dtype_bits = DTYPE_BITS.get(meta.dtype)
            if nbytes < 0 or (dtype_bits is not None and count * dtype_bits != nbytes * 8):
                raise ModelResolutionError(
                    f"{header.filename}: tensor {name!r} ({meta.dtype}, shape {list(meta.shape)}) has data "
                    f"offsets {meta.start}..{meta.end}, which do not match its shape (corrupt header)."
                )
            elements[meta.dtype] = elements.get(meta.dtype, 0) + count
            byte_totals[meta.dtype] = byte_totals.get(meta.dtype, 0) + nbytes
            file_bytes += nbytes
            if _is_aux(name):
                aux_bytes += nbytes
            else:
                logical += count * _pack_factor(name, meta, bits)
            if _is_mtp(name, num_layers):
                mtp_bytes += nbytes
        files.append(
            CheckpointFile(
                name=header.filename,
                tensors=len(header.tensors),
                tensor_bytes=file_bytes,
                header_bytes=header.header_bytes,
            )
        )
    return CheckpointInfo(
        format="safetensors",
        exact=True,
        total_bytes=sum(byte_totals.values()),
        parameters=sum(elements.values()),
        logical_parameters=round(logical),
        quantization_bytes=aux_bytes,
        mtp_bytes=mtp_bytes,
        dtypes={dtype: DtypeTotal(parameters=elements[dtype], bytes=byte_totals[dtype]) for dtype in sorted(elements)},
        files=files,
    )
