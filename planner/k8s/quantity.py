"""Kubernetes resource quantities (``20Gi``, ``40G``, ``81920Mi``, ``1.5Ti``, ``500m``) as numbers.

The planner core may not import the ``kubernetes`` client, so the grammar of
``k8s.io/apimachinery/pkg/api/resource.Quantity`` is read here: binary suffixes (Ki..Ei), decimal
suffixes (k, M, G, T, P, E, m) and decimal exponents (``1e9``).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import re2

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)}
_DECIMAL.update({"k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12)})
_DECIMAL.update({"P": Decimal(10**15), "E": Decimal(10**18)})
_QUANTITY = re2.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?\s*$")
_MAX = 1 << 62  # nothing kv-planner reads is larger; bigger inputs are refused, not computed


def parse_quantity(value: object) -> Decimal | None:
    """The number a quantity stands for, or None when ``value`` is not a quantity (or absurdly large)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = Decimal(str(value))
    else:
        match = _QUANTITY.match(str(value))
        if match is None:
            return None
        try:
            number = Decimal(match.group(1))
        except InvalidOperation:
            return None
        suffix = match.group(2) or ""
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            number *= _DECIMAL[suffix]
        else:  # exponent
            exponent = int(suffix[1:])
            if abs(exponent) > 30:
                return None
            number *= Decimal(10) ** exponent
    if number < 0 or number > _MAX:
        return None
    return number


def quantity_bytes(value: object) -> int | None:
    """A memory quantity in bytes (rounded up, as the API server rounds quantities), or None."""
    number = parse_quantity(value)
    if number is None:
        return None
    return int(number.to_integral_value(rounding="ROUND_CEILING"))
