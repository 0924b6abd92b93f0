"""The CLI's progress display: drawn on a terminal only, fed by the resolver."""

from __future__ import annotations

import io
import json

from hub_builders import config_bytes, header_only, llama_config
from hub_fake_server import Blob, FakeHub, Repo
from rich.console import Console

from planner.hub.progress import hub_progress
from planner.hub.resolve import resolve_model


def test_no_display_when_not_a_terminal() -> None:
    buffer = io.StringIO()
    with hub_progress(Console(file=buffer, force_terminal=False)) as progress:
        progress.step("x")
        progress.files("y", 2)
        progress.advance()
    assert buffer.getvalue() == ""


def test_terminal_display_shows_the_header_phase(hub: FakeHub) -> None:
    layout = {f"model.layers.{i}.w.weight": ("BF16", (4096, 4096)) for i in range(2)}
    files: dict[str, bytes | Blob] = {"config.json": config_bytes(llama_config(num_hidden_layers=2))}
    weight_map = {}
    for n, name in enumerate(layout):
        shard = f"model-0000{n + 1}-of-00002.safetensors"
        header, size = header_only({name: layout[name]})
        files[shard] = Blob.of(header, size=size)
        weight_map[name] = shard
    files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}).encode()
    hub.add(Repo("acme/progress")).commit(files)

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with hub_progress(console) as progress:
        resolved = resolve_model("acme/progress", progress=progress)
    assert resolved.checkpoint is not None and resolved.checkpoint.total_bytes == 2 * 4096 * 4096 * 2
    drawn = buffer.getvalue()
    assert "Reading safetensors headers of acme/progress" in drawn
    assert "2/2" in drawn


def test_nothing_is_drawn_until_the_first_report() -> None:
    """A model found in the catalog reports nothing: no bar, not even on a terminal."""
    buffer = io.StringIO()
    with hub_progress(Console(file=buffer, force_terminal=True, width=120)):
        pass
    assert buffer.getvalue() == ""
