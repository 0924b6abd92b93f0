"""Number syntax shared with vLLM, and byte formatting.

vLLM's integer flags (``--max-model-len``, ``--max-num-batched-tokens``, ``--kv-cache-memory-bytes``)
accept a suffix: lower case is decimal (``32k`` = 32,000), upper case is binary (``32K`` = 32,768).
Decimals are allowed only with decimal suffixes (``25.6k`` = 25,600). ``--max-model-len`` also
takes ``auto`` or ``-1`` (fit the context to memory). kv-planner accepts exactly that syntax so a
value can be pasted between a manifest and the CLI.
"""

from __future__ import annotations

import re

from planner.errors import PlannerInputError

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10

DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
"""Bytes per element of the model / state dtypes vLLM uses."""

AUTO = -1
"""The value vLLM stores for ``--max-model-len auto`` / ``-1``."""

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def parse_human_int(value: str | int) -> int:
    """Parse an integer the way vLLM's ``human_readable_int`` does.

    >>> parse_human_int("32k"), parse_human_int("32K"), parse_human_int("25.6k"), parse_human_int("20G")
    (32000, 32768, 25600, 21474836480)
    """
    if isinstance(value, bool):
        raise PlannerInputError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    text = value.strip()
    match = _HUMAN_INT.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise PlannerInputError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            )
        return int(number) * _BINARY[suffix]
    try:
        return int(text)
    except ValueError:
        raise PlannerInputError(
            f"invalid integer {value!r}: use a plain number or a suffix "
            "(k/m/g/t = 10^3.., K/M/G/T = 2^10..), e.g. 32k or 32K"
        ) from None


def parse_human_int_or_auto(value: str | int) -> int:
    """Like :func:`parse_human_int`, plus ``auto``/``-1`` which return :data:`AUTO`."""
    if isinstance(value, str) and (value.strip() == "-1" or value.strip().lower() == "auto"):
        return AUTO
    return parse_human_int(value)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]i?[bB]?|[bB])?\s*$")
_SIZE_FACTORS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "ki": KiB,
    "mi": MiB,
    "gi": GiB,
    "ti": 2**40,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 2**40,
}


def parse_size(value: str | int) -> int:
    """Parse a memory size for ``--gpu-memory``: ``80GiB``, ``79.15GiB``, ``24G`` (vLLM style: G = GiB),
    ``40GB`` (decimal) or a plain byte count.

    A bare upper-case ``G``/``M``/``K`` follows vLLM's binary meaning; ``GB``/``MB`` are decimal and
    ``GiB``/``MiB`` binary, as written on spec sheets.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    match = _SIZE.match(text)
    if not match:
        raise PlannerInputError(f"invalid size {value!r}: write e.g. 80GiB, 24G or 48000000000")
    number, unit = match.group(1), match.group(2) or ""
    if unit in ("K", "M", "G", "T"):
        factor = _BINARY[unit]
    else:
        key = unit.lower()
        if key not in _SIZE_FACTORS:
            raise PlannerInputError(f"invalid size unit in {value!r}")
        factor = _SIZE_FACTORS[key]
    return int(float(number) * factor)


def gib(num_bytes: float) -> float:
    """Bytes to GiB (float)."""
    return num_bytes / GiB


def format_bytes(num_bytes: float) -> str:
    """Human-friendly binary size: ``128 KiB``, ``4 GiB``, ``1.5 MiB``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            if unit == "B" or value == int(value):
                return f"{int(value):,} {unit}"
            return f"{value:,.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers, as vLLM's ``cdiv``."""
    return -(a // -b)
