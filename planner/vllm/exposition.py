"""Prometheus text exposition (format 0.0.4, what vLLM serves) -> samples: the one parser of /metrics.

Used by the exporter (admission/exporter/normalize.py), the load probe (planner/probe/metrics.py) and
the simulator's tests. kv-planner's own rather than prometheus_client's
``text_string_to_metric_families``, for three reasons:

* the planner core imports no metrics library (DESIGN.md), and this parser serves core readers too;
* the page comes from a pod kv-planner does not trust: the parse must be bounded as it goes (sample
  count, label-value length), and reject what promtool rejects instead of silently merging it
  (a second ``# TYPE`` line for a family, the same series twice, a malformed line of a read family);
* cost: only the families the caller asks for are parsed. Their lines are picked from the page by one
  compiled regular expression (C speed), so a 100 kB vLLM page costs well under a millisecond of
  parsing, where prometheus_client's parser spends ~5 ms interpreting every histogram bucket.

Lines of other families are not interpreted beyond their ``# TYPE`` line. Timestamps are ignored.
``tests/core/test_exposition.py`` checks the result against prometheus_client's parser on vLLM pages
of several releases and against adversarial pages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator, Iterable
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ExpositionError, ExpositionLimitError

TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "info", "stateset", "gaugehistogram"})


class Sample(NamedTuple):
    labels: dict[str, str]
    value: float


class ParseLimits(BaseModel):
    """Bounds on what one page may make the reader hold (a target beyond them is refused, not truncated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_samples: int = Field(default=20_000, ge=1, description="samples of the read families, per page")
    max_label_value_chars: int = Field(default=512, ge=1, description="characters per label value of a read sample")
    # vLLM 0.33's cache_config_info carries 38 labels, the most of any read family; its 0.19 page with two
    # engines has 2,016 label pairs in all. Without these bounds one 4 MiB line of 460,000 empty labels
    # held ~360 MiB while it was read.
    max_labels: int = Field(default=128, ge=1, description="labels of one read sample")
    max_label_pairs: int = Field(default=250_000, ge=1, description="labels of all read samples, per page")
    max_line_chars: int = Field(
        default=65_536, ge=1, description="characters of one line of a read family (checked before it is matched)"
    )


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# Linear-time patterns only (the page is untrusted): no nested or adjacent unbounded repeats that can
# trade characters between them.
# A literal first (``# TYPE``), so the engine scans with a fast substring search; the line start is
# checked in Python on the few hits.
_TYPE_LINE = re.compile(r"#[ \t]+TYPE[ \t]+(\S+)[ \t]*(\S*)[^\n]*")
# Label text: characters other than quote/brace, or a quoted string with escapes (`}` allowed inside).
_QUOTED_BODY = r'[^"\\\n]*(?:\\.[^"\\\n]*)*'  # unrolled: one pass, no per-character alternation
_LABEL_TEXT = rf'[^"\n}}]*(?:"{_QUOTED_BODY}"[^"\n}}]*)*'
# The name is followed directly by its labels or by the blanks before the value (no optional blanks
# next to required ones: a line of 20,000 blanks would otherwise cost seconds).
_SAMPLE = re.compile(rf"({_NAME})(?:\{{({_LABEL_TEXT})\}})?[ \t]+(\S+)(?:[ \t]+\S+)?[ \t]*\r?")
_PAIR = rf'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"({_QUOTED_BODY})"'
_LABEL = re.compile(_PAIR)
# Pairs separated by one comma (a trailing one allowed): no two repeats can trade characters.
_LABELS = re.compile(rf"[ \t]*(?:{_PAIR}[ \t]*(?:,[ \t]*{_PAIR}[ \t]*)*(?:,[ \t]*)?)?")


def _line_selector(names: Iterable[str]) -> re.Pattern[str]:
    ordered = sorted(names, key=len, reverse=True)
    # The shared literal prefix ("vllm:") first lets the engine skip ahead with a substring search.
    prefix = ordered[0] if ordered else ""
    for name in ordered:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    alternatives = "|".join(re.escape(name[len(prefix) :]) for name in ordered)
    return re.compile(rf"{re.escape(prefix)}(?:{alternatives})(?=[{{ \t])[^\n]*")


_SELECTORS: dict[frozenset[str], re.Pattern[str]] = {}


def _selector(names: frozenset[str]) -> re.Pattern[str]:
    pattern = _SELECTORS.get(names)
    if pattern is None:
        pattern = _SELECTORS[names] = _line_selector(names)
    return pattern


def _unescape(value: str) -> str:
    """``\\\\`` -> ``\\``, ``\\"`` -> ``"``, ``\\n`` -> newline, any other ``\\x`` kept as written. Split on the
    escaped backslashes first (left to right, as the escapes pair up), so each part's backslashes escape
    the character after them: C-speed string operations, where a callback per escape cost ~1 s on a page
    of 2 million of them."""
    if "\\" not in value:
        return value
    parts = value.split("\\\\")
    return "\\".join(part.replace('\\"', '"').replace("\\n", "\n") if "\\" in part else part for part in parts)


def _labels(text: str, line: str, limits: ParseLimits) -> dict[str, str]:
    """The labels of one sample (at most ``limits.max_labels``, refused as soon as there are more)."""
    if _LABELS.fullmatch(text) is None:
        raise ExpositionError(f"malformed labels in line {line[:120]!r}")
    labels: dict[str, str] = {}
    for found in _LABEL.finditer(text):
        name, raw = found.group(1), found.group(2)
        if len(labels) >= limits.max_labels:
            raise ExpositionLimitError(
                "too_many_labels", f"{line[: line.find('{')][:120]!r} has more than {limits.max_labels} labels"
            )
        if len(raw) > limits.max_label_value_chars:
            raise ExpositionLimitError(
                "label_too_long",
                f"label {name} of {line[: line.find('{')]!r} is {len(raw)} characters long "
                f"(limit {limits.max_label_value_chars})",
            )
        if name in labels:
            raise ExpositionError(f"label {name} repeated in line {line[:120]!r}")
        labels[name] = _unescape(raw) if "\\" in raw else raw
    return labels


def _value(text: str, line: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ExpositionError(f"bad sample value {text[:40]!r} in line {line[:120]!r}") from None


class Exposition(NamedTuple):
    """The read families' samples by sample name, and the declared type of every family on the page."""

    samples: dict[str, list[Sample]]
    types: dict[str, str]

    def get(self, name: str) -> list[Sample]:
        return self.samples.get(name, [])


STEP = 64
"""Lines read between two yields of the ``*_steps`` generators (well under a millisecond of work)."""

Result = TypeVar("Result")
Steps = Generator[None, None, Result]


def run_steps(steps: Steps[Result]) -> Result:
    """Run a ``*_steps`` generator to its end and return its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def check_types(text: str) -> dict[str, str]:
    """Every ``# TYPE`` line of the page; a family typed twice or with an unknown type is an error.

    promtool (and Prometheus' own parser) reject both; prometheus_client's parser starts a new family
    silently, which made the exporter accept such pages as healthy.
    """
    return run_steps(check_types_steps(text))


def check_types_steps(text: str) -> Steps[dict[str, str]]:
    """:func:`check_types`, yielding every :data:`STEP` lines (a caller may do other work in between)."""
    types: dict[str, str] = {}
    for seen, match in enumerate(_TYPE_LINE.finditer(text), start=1):
        if seen % STEP == 0:
            yield
        start = match.start()
        if start and text[start - 1] != "\n":
            continue
        name, kind = match.group(1), match.group(2)
        if kind not in TYPES:
            raise ExpositionError(f"# TYPE line for {name[:120]!r} has an unknown type {kind[:40]!r}")
        if name in types:
            raise ExpositionError(f"two # TYPE lines for {name[:120]!r} ({types[name]}, {kind})")
        types[name] = kind
    return types


def parse(text: str, names: frozenset[str], limits: ParseLimits | None = None) -> Exposition:
    """Samples of the sample ``names`` asked for (e.g. ``vllm:num_preemptions_total``,
    ``vllm:request_prompt_tokens_bucket``), after checking the page's ``# TYPE`` lines.

    Raises :class:`ExpositionError` for a page promtool would reject in those lines, and
    :class:`ExpositionLimitError` (reason ``too_many_samples`` or ``label_too_long``) when the page
    exceeds ``limits``; nothing is truncated silently.
    """
    return run_steps(parse_steps(text, names, limits))


def parse_steps(text: str, names: frozenset[str], limits: ParseLimits | None = None) -> Steps[Exposition]:
    """:func:`parse`, yielding every :data:`STEP` lines: the exporter reads many pages on one event loop,
    and a page that is slow to read (every line at the bounds) must not hold the others up."""
    limits = limits or ParseLimits()
    types = yield from check_types_steps(text)
    samples: dict[str, list[Sample]] = {}
    seen: set[tuple[str, str]] = set()
    pairs = 0
    count = 0
    for found in _selector(names).finditer(text):
        start = found.start()
        if start and text[start - 1] != "\n":
            continue  # the name inside another line (a label value, a HELP text)
        count += 1
        if count % STEP == 0:
            yield
        if found.end() - start > limits.max_line_chars:
            raise ExpositionLimitError(
                "line_too_long", f"a line of {text[start : start + 60]!r}... is over {limits.max_line_chars} characters"
            )
        line = found.group(0)
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ExpositionError(f"malformed sample line {line[:120]!r}")
        if count > limits.max_samples:
            raise ExpositionLimitError(
                "too_many_samples", f"more than {limits.max_samples} samples of the families kv-planner reads"
            )
        name, raw_labels, raw_value = match.group(1), match.group(2), match.group(3)
        series = (name, raw_labels or "")
        if series in seen:
            raise ExpositionError(f"series {line[: line.rfind(' ')][:120]!r} appears twice")
        seen.add(series)
        labels = _labels(raw_labels, line, limits) if raw_labels else {}
        pairs += len(labels)
        if pairs > limits.max_label_pairs:
            raise ExpositionLimitError(
                "too_many_labels", f"more than {limits.max_label_pairs} labels on the samples kv-planner reads"
            )
        samples.setdefault(name, []).append(Sample(labels, _value(raw_value, line)))
    return Exposition(samples, types)


def bucket_bound(le: str) -> float:
    """A histogram bucket's ``le`` label as a number (``+Inf`` included)."""
    try:
        value = float(le)
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise ExpositionError(f"bucket bound le={le[:40]!r} is not a number")
    return value
