"""A stand-in tokenizer: deterministic, documented, good enough to size requests.

The simulator has no model weights and no real vocabulary. Text is split into words and punctuation
(regex ``\\w+|[^\\w\\s]``); each piece is one token whose id is a stable hash of the piece. Generated
token ids are drawn from a seeded RNG and rendered as synthetic words. A prompt given as a list of
token ids (the OpenAI completions API allows it) is used as is, which is how load tests get exact
lengths.
"""

from __future__ import annotations

import re
import zlib

from planner.sim.engine import VOCAB_SIZE

_PIECE = re.compile(r"\w+|[^\w\s]")
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "vi",
    "so",
    "pe",
    "da",
    "ko",
    "li",
    "ma",
    "no",
    "re",
    "tu",
)


def encode(text: str) -> list[int]:
    return [zlib.crc32(piece.encode()) % (VOCAB_SIZE - 1) + 1 for piece in _PIECE.findall(text)]


def decode_token(token_id: int) -> str:
    """A pronounceable fake word for a token id, with a leading space."""
    first = _SYLLABLES[token_id % len(_SYLLABLES)]
    second = _SYLLABLES[(token_id // len(_SYLLABLES)) % len(_SYLLABLES)]
    return f" {first}{second}"


def chat_prompt(messages: list[tuple[str, str]]) -> list[int]:
    """Token ids of a chat conversation under the simulator's template.

    Each message becomes ``<|role|>`` followed by its content, and the prompt ends with
    ``<|assistant|>`` (the generation prompt), like a typical chat template.
    """
    tokens: list[int] = []
    for role, content in messages:
        tokens.extend(encode(f"<|{role}|>"))
        tokens.extend(encode(content))
    tokens.extend(encode("<|assistant|>"))
    return tokens
