"""Command lines of launchers that wrap vLLM's engine arguments among their own flags.

KServe's ``huggingfaceserver`` and NVIDIA Dynamo's ``dynamo.vllm`` accept vLLM's engine flags
(they add ``AsyncEngineArgs`` to their own parser) next to flags of their own (``--model_name``,
``--model_id``, ``--backend``; ``--is-prefill-worker``, ``--connector``, ...). kv-planner keeps the
words vLLM's option table for the release knows (with their values) and leaves the launcher's own
flags out, remembering each kept word's position so that changes land where the user wrote them.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.vllm.argv_table import flag_table


def _option(word: str) -> tuple[str, str | None]:
    """(``--option-name`` with dashes, inline value or None) of a ``--flag[=value]`` word."""
    name, equals, value = word.partition("=")
    return "--" + name[2:].replace("_", "-"), (value if equals else None)


def vllm_words(words: Sequence[str], version: str | None) -> list[tuple[str, int]]:
    """(word, index in ``words``) of the words that are vLLM engine flags and their values."""
    options = flag_table(version).options
    kept: list[tuple[str, int]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            i += 1
            continue
        option, inline = _option(word)
        kind = options.get(option, (None, None))[1]
        takes_value = kind in ("value", "optional", "multi") or (kind or "").startswith("n")
        following = words[i + 1] if i + 1 < len(words) else None
        value_follows = inline is None and following is not None and not following.startswith("--")
        if kind is None:
            i += 2 if value_follows else 1  # the launcher's own flag (and its value)
            continue
        kept.append((word, i))
        if takes_value and value_follows:
            assert following is not None
            kept.append((following, i + 1))
            i += 2
        else:
            i += 1
    return kept


def flag_value(words: Sequence[str], *names: str) -> str | None:
    """The last value of any of ``names`` (``--model_id X`` or ``--model_id=X``; ``_``/``-`` alike)."""
    wanted = {"--" + n.lstrip("-").replace("_", "-") for n in names}
    found: str | None = None
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        option, inline = _option(word)
        if option not in wanted:
            continue
        if inline is not None:
            found = inline
        elif i + 1 < len(words):
            found = words[i + 1]
    return found
