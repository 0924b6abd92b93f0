"""The one /metrics parser (planner/vllm/exposition.py): same samples as prometheus_client's parser on
real vLLM pages, strict where promtool is, bounded on hostile pages, linear on adversarial strings."""

from __future__ import annotations

import math
import random
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner.errors import ExpositionError, ExpositionLimitError, ScrapeError
from planner.vllm import metrics_catalog as catalog
from planner.vllm.exposition import STEP, ParseLimits, check_types, parse, parse_steps
from tests.exporter.conftest import PAGES


def _reference(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.path.name)
def test_every_sample_agrees_with_prometheus_client(page: object) -> None:
    text = page.text  # type: ignore[attr-defined]
    expected = _reference(text)
    ours = parse(text, frozenset(expected), ParseLimits(max_samples=100_000))
    assert set(ours.samples) == set(expected)
    for name, samples in expected.items():
        got = ours.samples[name]
        assert [labels for labels, _ in got] == [labels for labels, _ in samples], name
        assert all(_same(a, b) for (_, a), (_, b) in zip(got, samples, strict=True)), name


def test_only_the_names_asked_for_are_read() -> None:
    page = next(p for p in PAGES if p.release == "0.33.0")
    wanted = frozenset({catalog.exposed_name("running")})
    result = parse(page.text, wanted)
    assert set(result.samples) == set(wanted)
    # Every family's # TYPE line is still checked (and recorded), read or not.
    assert result.types["vllm:e2e_request_latency_seconds"] == "histogram"


def test_escapes_and_odd_spacing() -> None:
    text = 'm{a="x\\"y\\\\z\\n",b = "}{, "} 2.5 1700000000000\nm{a="2"} +Inf\nm NaN\n'
    result = parse(text, frozenset({"m"}))
    assert [labels for labels, _ in result.get("m")] == [{"a": 'x"y\\z\n', "b": "}{, "}, {"a": "2"}, {}]
    values = [value for _, value in result.get("m")]
    assert values[:2] == [2.5, math.inf] and math.isnan(values[2])
    assert _reference(text)["m"][0][0] == result.get("m")[0].labels


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # promtool: "second TYPE line for metric name"; prometheus_client accepts it silently.
        ("# TYPE m gauge\nm 1\n# TYPE m counter\nm_total 2\n", "two # TYPE lines"),
        ("# TYPE m gauge\n# TYPE m gauge\nm 1\n", "two # TYPE lines"),
        ("# TYPE m thing\nm 1\n", "unknown type"),
        ("m 1\nm 2\n", "appears twice"),
        ('m{a="1",a="2"} 1\n', "repeated"),
        ("m{a=1} 1\n", "malformed"),
        ("m banana\n", "bad sample value"),
        ('m{a="1"}\n', "malformed"),
    ],
)
def test_pages_promtool_rejects_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(ExpositionError, match=fragment):
        parse(text, frozenset({"m", "m_total"}))


def test_broken_type_lines_are_found_in_families_nobody_reads() -> None:
    with pytest.raises(ExpositionError):
        check_types("# TYPE other gauge\nother 1\n# TYPE other gauge\n")


def test_sample_count_is_bounded_while_parsing() -> None:
    text = "".join(f'm{{engine="{i}"}} 1\n' for i in range(1_001))
    assert len(parse(text, frozenset({"m"}), ParseLimits(max_samples=1_001)).get("m")) == 1_001
    with pytest.raises(ExpositionLimitError) as raised:
        parse(text, frozenset({"m"}), ParseLimits(max_samples=1_000))
    assert raised.value.reason == "too_many_samples" and isinstance(raised.value, ScrapeError)


def test_label_value_length_is_bounded() -> None:
    text = f'm{{model_name="{"x" * 513}"}} 1\n'
    with pytest.raises(ExpositionLimitError) as raised:
        parse(text, frozenset({"m"}))
    assert raised.value.reason == "label_too_long"
    assert parse(text, frozenset({"m"}), ParseLimits(max_label_value_chars=513)).get("m")[0].value == 1.0


def _unescaped_by_callback(raw: str) -> str:
    # The exposition format's rule, written the obvious way (what the parser did before): each backslash
    # escapes the character after it; \\, \" and \n are replaced, any other pair is kept.
    table = {"n": "\n", "\\": "\\", '"': '"'}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), "\\" + m.group(1)), raw)


def test_label_escapes_read_as_the_format_says() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        # Raw label text as the page has it: every backslash is followed by a character (the pattern's rule).
        pieces = [
            rng.choice(["\\\\", '\\"', "\\n", "\\x", "\\\\n", "n", "x", " ", "é"]) for _ in range(rng.randint(0, 12))
        ]
        raw = "".join(pieces)
        (sample,) = parse(f'm{{a="{raw}"}} 1\n', frozenset({"m"})).get("m")
        assert sample.labels["a"] == _unescaped_by_callback(raw), raw


def test_labels_per_sample_and_per_page_are_bounded() -> None:
    one = "m{" + ",".join(f'l{i}="x"' for i in range(129)) + "} 1\n"
    with pytest.raises(ExpositionLimitError) as raised:
        parse(one, frozenset({"m"}))
    assert raised.value.reason == "too_many_labels" and "128 labels" in raised.value.message
    assert len(parse(one, frozenset({"m"}), ParseLimits(max_labels=129)).get("m")[0].labels) == 129
    page = "".join(f'm{{engine="{i}",a="1",b="2",c="3"}} 1\n' for i in range(1_000))
    assert len(parse(page, frozenset({"m"}), ParseLimits(max_label_pairs=4_000)).get("m")) == 1_000
    with pytest.raises(ExpositionLimitError) as raised:
        parse(page, frozenset({"m"}), ParseLimits(max_label_pairs=3_999))
    assert raised.value.reason == "too_many_labels"


def test_a_long_line_is_refused_before_it_is_matched() -> None:
    line = 'm{a="' + "x" * 70_000 + '"} 1\n'
    with pytest.raises(ExpositionLimitError) as raised:
        parse(line, frozenset({"m"}), ParseLimits(max_label_value_chars=100_000))
    assert raised.value.reason == "line_too_long"


def test_the_parse_gives_way_every_step_of_lines() -> None:
    text = "".join(f'm{{engine="{i}"}} 1\n' for i in range(10 * STEP)) + "".join(
        f"# TYPE f{i} gauge\n" for i in range(5 * STEP)
    )
    steps = parse_steps(text, frozenset({"m"}))
    yields = 0
    while True:
        try:
            next(steps)
            yields += 1
        except StopIteration as done:
            result = done.value
            break
    assert yields == 15 and len(result.get("m")) == 10 * STEP


@pytest.mark.parametrize(
    "line",
    [
        "m{" + "}" * 200_000 + " 1 x y z",
        'm{a="' + "\\\\" * 100_000 + "} 1 2 3",
        "m{" + '"' * 200_001,
        "m " + "1 " * 100_000,
        "# TYPE " + "a" * 200_000 + " b c d",
        "# TYPE m" + " " * 200_000 + "x y",
        'm{a="' + "," * 200_000,
        "m" + " " * 200_000 + "1 2 3 4",
        'm{a="b"' + " " * 200_000 + "x",
        'm{a="b"' + " " * 200_000 + "x} 1",
        'm{a="b", ' + " " * 200_000 + "x} 1",
    ],
    ids=[
        "braces",
        "backslashes",
        "quotes",
        "fields",
        "type-name",
        "type-spaces",
        "commas",
        "blanks",
        "label-blanks",
        "pair-blanks",
        "comma-blanks",
    ],
)
def test_adversarial_lines_end_quickly_with_an_error(line: str) -> None:
    # A quadratic regular expression would keep this test running for hours (the suite's timeout).
    with pytest.raises(ScrapeError):
        for _ in range(3):
            parse(line + "\n", frozenset({"m"}))
            check_types(line + "\n# TYPE m gauge\n# TYPE m gauge\n")
