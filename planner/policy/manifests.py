"""Read manifest streams (multi-document YAML or JSON, Helm and Kustomize output, ``kubectl get -o yaml``).

Each document is parsed on its own, so one invalid document is reported with its number while the
others are still checked. ``kind: List`` documents and typed lists (``DeploymentList``, ``PodList``,
``DynamoGraphDeploymentList``: what the API server returns for a collection, as client-go and
``kubectl get --raw`` write it) are expanded into their items.

Manifests are untrusted input (docs/security.md): :data:`MAX_INPUT_BYTES` bounds what is read (the CLI
reads at most that much; ``-f /dev/zero`` is an error, not an endless read), and a document nested
deeper than the parser can follow, or past :mod:`planner.untrusted`'s depth and node bounds, is that
document's error, never a RecursionError.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import re2
import yaml
from pydantic import BaseModel, ConfigDict

from planner.untrusted import MAX_NODES, count_values, shape_problem

_SEPARATOR = re2.compile(r"^---(?:[ \t].*)?$|^\.\.\.[ \t]*$")
MAX_INPUT_BYTES = 64 * 2**20  # all inputs of one run together; a Helm render of a large platform is ~10 MB
_TOO_DEEP = "nested too deeply to read (a Kubernetes object is a few dozen levels deep)"


class Document(BaseModel):
    """One document of the input: its number (0-based, across all inputs), source and content."""

    model_config = ConfigDict(frozen=True)

    index: int
    source: str
    line: int
    content: Any = None
    error: str | None = None


def _chunks(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each YAML document, split at ``---`` / ``...`` lines."""
    start, lines = 1, list[str]()
    for number, line in enumerate(text.splitlines(), start=1):
        if _SEPARATOR.match(line):
            yield start, "\n".join(lines)
            start, lines = number + 1, []
        else:
            lines.append(line)
    yield start, "\n".join(lines)


def _is_blank(chunk: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in chunk.splitlines())


# Documents of one input (a file or stdin): thousands in a rendered chart; beyond this it is not a manifest
# set but a way to make `planner check` hold millions of objects.
MAX_DOCUMENTS = 20_000


def read_documents(text: str, source: str, first_index: int = 0) -> list[Document]:
    """The documents of one input (YAML stream or a JSON document)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            content = json.loads(text)
            problem = shape_problem(content)
            if problem is not None:
                return [Document(index=first_index, source=source, line=1, error=f"{source}: line 1: {problem}")]
            return _expand(Document(index=first_index, source=source, line=1, content=content))
        except RecursionError:
            return [Document(index=first_index, source=source, line=1, error=f"{source}: line 1: {_TOO_DEEP}")]
        except ValueError:
            pass  # YAML is a superset of JSON: let the YAML reader report the error with a line number
    documents: list[Document] = []
    index = first_index
    values_left = MAX_NODES  # over the whole input: YAML aliases in many small documents add up
    read = 0
    for line, chunk in _chunks(text):
        if _is_blank(chunk):
            continue
        read += 1
        if read > MAX_DOCUMENTS:
            documents.append(
                Document(
                    index=index,
                    source=source,
                    line=line,
                    error=f"{source}: line {line}: more than {MAX_DOCUMENTS:,} documents: the rest is not read",
                )
            )
            break
        try:
            content = yaml.safe_load(chunk)
        except RecursionError:
            documents.append(
                Document(index=index, source=source, line=line, error=f"{source}: line {line}: {_TOO_DEEP}")
            )
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {line + mark.line}" if mark is not None else f"document at line {line}"
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            documents.append(
                Document(index=index, source=source, line=line, error=f"{source}: {where}: invalid YAML: {problem}")
            )
        except ValueError as error:  # an integer past Python's 4,300-digit conversion limit
            documents.append(
                Document(index=index, source=source, line=line, error=f"{source}: line {line}: {str(error)[:120]}")
            )
        else:
            if content is None:
                continue
            values = count_values(content, values_left)
            values_left -= values
            problem = (
                f"the input holds more than {MAX_NODES:,} values (YAML aliases expanding?): the rest is not read"
                if values_left < 0
                else shape_problem(content)
            )
            if problem is not None:
                documents.append(
                    Document(index=index, source=source, line=line, error=f"{source}: line {line}: {problem}")
                )
                if values_left < 0:
                    break
            else:
                documents += _expand(Document(index=index, source=source, line=line, content=content))
        index += 1
    return documents


def _expand(document: Document) -> list[Document]:
    """One document per object: ``kind: List`` / typed-list items and top-level YAML lists are unpacked,
    each item checked on its own (an item that is not a mapping is that item's error, not a crash)."""
    content = document.content
    if isinstance(content, dict) and content.get("kind") == "List" and isinstance(content.get("items"), list):
        return [d for item in content["items"] for d in _expand_item(document, item)]
    item_kind = _typed_list_item_kind(content)
    if item_kind is not None:
        assert isinstance(content, dict)
        defaults = {"apiVersion": content.get("apiVersion"), "kind": item_kind}
        return [d for item in content["items"] for d in _expand_item(document, _with_type(item, defaults))]
    if isinstance(content, list):
        return [d for item in content for d in _expand_item(document, item)]
    if not isinstance(content, dict):
        return [
            document.model_copy(
                update={
                    "content": None,
                    "error": f"{document.source}: line {document.line}: not a Kubernetes object (a mapping)",
                }
            )
        ]
    return [document]


def _typed_list_item_kind(content: Any) -> str | None:
    """``Deployment`` for a ``DeploymentList``: a typed list is ``<Kind>List`` with ``items`` and list
    metadata (``resourceVersion``, ``continue``: a ListMeta has no ``name``, unlike an object whose own
    kind happens to end in "List")."""
    if not isinstance(content, dict) or not isinstance(content.get("items"), list):
        return None
    kind = content.get("kind")
    if not isinstance(kind, str) or not kind.endswith("List") or len(kind) <= len("List"):
        return None
    meta = content.get("metadata")
    if meta is not None and (not isinstance(meta, dict) or "name" in meta or "generateName" in meta):
        return None
    return kind[: -len("List")]


def _with_type(item: object, defaults: dict[str, Any]) -> object:
    """A typed list's item with the list's apiVersion and item kind where it has none (the API server
    leaves them out of the items of a typed list; client-go fills them in the same way on decoding)."""
    if not isinstance(item, dict):
        return item
    missing = {k: v for k, v in defaults.items() if isinstance(v, str) and not isinstance(item.get(k), str)}
    return {**missing, **{k: v for k, v in item.items() if k not in missing}} if missing else item


def _expand_item(document: Document, item: object) -> list[Document]:
    if isinstance(item, list):  # a list inside a list is not a manifest
        item = None
    return _expand(document.model_copy(update={"content": item}))
