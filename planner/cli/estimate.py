"""``planner estimate``: the KV cost per token and per sequence, from a model or raw dimensions."""

from typing import Annotated

import typer
from pydantic import BaseModel, ConfigDict, Field

from planner.cli._app import app
from planner.cli._commands import COMMANDS
from planner.cli._lookup import model_for
from planner.cli._output import OutputFormat, console, print_json, print_yaml
from planner.errors import PlannerInputError
from planner.kv.dtypes import resolve_kv_dtype
from planner.kv.specs import (
    attention_bytes_per_token,
    deepseek_v4_caches,
    kv_bytes_per_token_all_layers,
    mamba_state_bytes,
)
from planner.models.spec import ModelSpec
from planner.units import DTYPE_BYTES, format_bytes, parse_human_int


class SequenceCost(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: int
    bytes: int


class Estimate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bytes_per_token: int
    sequences: list[SequenceCost]
    total_bytes: int
    num_seqs: int = 1
    layers: dict[str, int] = Field(
        default_factory=dict, description="KV-holding layers by kind: full, sliding_window, chunked_local, mamba"
    )
    state_bytes_per_sequence: int = Field(default=0, description="Mamba/linear-attention state, any length")
    note: str | None = None


def sequence_bytes(
    model: ModelSpec, tokens: int, per_layer_token: int, state_per_layer: int, full_layer_token: int | None = None
) -> int:
    """What one sequence of ``tokens`` keeps (TP=1): full layers every token, sliding-window layers the
    last ``sliding_window`` tokens, chunked-local layers the current chunk, Mamba layers their state.
    ``full_layer_token``: a full layer's bytes per token where it differs (Gemma-4's global layers).
    vLLM allocates whole blocks and keeps the tokens in flight on top of a window
    (``v1/kv_cache_interface.py: SlidingWindowSpec.max_memory_usage_bytes``); ``planner recommend``
    counts those, this estimate does not."""
    if model.compressed_attention is not None:
        return _deepseek_v4_sequence_bytes(model, tokens)
    pattern = model.layer_pattern
    full = pattern.count("F") * tokens * (per_layer_token if full_layer_token is None else full_layer_token)
    kept = 0
    if model.sliding_window:
        kept += pattern.count("S") * min(tokens, model.sliding_window)
    if model.attention_chunk_size:
        kept += pattern.count("C") * min(tokens, model.attention_chunk_size)
    return full + kept * per_layer_token + pattern.count("M") * state_per_layer


def _deepseek_v4_sequence_bytes(model: ModelSpec, tokens: int) -> int:
    """DeepSeek-V4: every cache vLLM keeps (planner/kv/specs.py: deepseek_v4_caches) at its bytes per token,
    the compressed and indexer caches for every token, the window and compressor-state caches for their window."""
    total = 0.0
    for _, cache in deepseek_v4_caches(model, 256):
        kept = tokens if cache.window is None else min(tokens, cache.window)
        total += cache.page_bytes / cache.block_size * kept
    return int(total)


def _raw_model(layers: int, kv_heads: int, head_dim: int) -> ModelSpec:
    return ModelSpec(
        id="custom",
        architecture="custom",
        model_type="custom",
        num_layers=layers,
        hidden_size=head_dim,
        num_attention_heads=kv_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=1,
        intermediate_size=0,
        derived_max_model_len=1 << 30,
        layer_pattern="F" * layers,
    )


def kv_bytes_per_layer_token(
    model: ModelSpec, kv_cache_dtype: str, dtype_bytes: int | None, *, full: bool = False
) -> int:
    """K+V bytes per token of one KV layer (TP=1); ``full``: a full-attention layer (Gemma-4's differ)."""
    if dtype_bytes is not None:
        if model.mla:
            return model.mla.latent_size * dtype_bytes + model.mla.indexer_bytes_per_token
        if full:
            return model.full_kv_heads * (model.full_head_size + model.full_head_size_v) * dtype_bytes
        return model.num_kv_heads * (model.head_dim + model.head_size_v) * dtype_bytes
    kv = resolve_kv_dtype(kv_cache_dtype, model, model.dtype)
    return attention_bytes_per_token(model, kv, 1, full=full)


def kv_bytes_per_token(model: ModelSpec, kv_cache_dtype: str, dtype_bytes: int | None) -> int:
    """K+V bytes per token over the model's KV layers (TP=1). Sliding-window layers still cost this
    per token they keep; this is the figure before windows cap what a sequence keeps."""
    if model.compressed_attention is not None:
        if dtype_bytes is not None:
            raise PlannerInputError("--dtype-bytes: DeepSeek-V4's KV cache format is fixed (fp8_ds_mla)")
        return kv_bytes_per_token_all_layers(model, resolve_kv_dtype(kv_cache_dtype, model, model.dtype), 1)
    pattern = model.layer_pattern
    other = sum(1 for letter in pattern if letter in "SC")
    full = pattern.count("F")
    total = full * kv_bytes_per_layer_token(model, kv_cache_dtype, dtype_bytes, full=True) if full else 0
    return total + (other * kv_bytes_per_layer_token(model, kv_cache_dtype, dtype_bytes) if other else 0)


@app.command(
    help=COMMANDS["estimate"].help,
    epilog="Example: planner estimate --layers 32 --kv-heads 8 --head-dim 128 --tokens 32768 --num-seqs 8",
)
def estimate(
    tokens: Annotated[str, typer.Option("--tokens", help="Sequence lengths, comma-separated (1024,8k,32K).")],
    model: Annotated[str | None, typer.Option("--model", help="HF id, catalog id or local path.")] = None,
    layers: Annotated[int | None, typer.Option("--layers", min=1)] = None,
    kv_heads: Annotated[int | None, typer.Option("--kv-heads", min=1)] = None,
    head_dim: Annotated[int | None, typer.Option("--head-dim", min=1)] = None,
    kv_cache_dtype: Annotated[str, typer.Option("--kv-cache-dtype")] = "auto",
    dtype_bytes: Annotated[
        int | None, typer.Option("--dtype-bytes", min=1, max=8, help="Bytes per element (overrides the dtype).")
    ] = None,
    num_seqs: Annotated[int, typer.Option("--num-seqs", min=1, help="Sequences of each length.")] = 1,
    revision: Annotated[str | None, typer.Option("--revision")] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.table,
) -> None:
    if dtype_bytes is not None and dtype_bytes not in (1, 2, 4):
        raise PlannerInputError(f"--dtype-bytes {dtype_bytes}: KV elements are 1 (fp8), 2 (16-bit) or 4 bytes")
    if model is not None and (layers or kv_heads or head_dim):
        raise PlannerInputError("give --model, or --layers/--kv-heads/--head-dim, not both")
    if model is not None:
        spec = model_for(model, revision=revision, token=None, refresh=False).spec
    elif layers and kv_heads and head_dim:
        spec = _raw_model(layers, kv_heads, head_dim)
        if dtype_bytes is None and kv_cache_dtype == "auto":
            dtype_bytes = 2
    else:
        raise PlannerInputError("give --model, or all of --layers, --kv-heads and --head-dim")
    lengths = [parse_human_int(t) for t in tokens.split(",") if t.strip()]
    if not lengths or any(n < 1 for n in lengths):
        raise PlannerInputError(f"--tokens needs positive lengths, got {tokens!r}")
    per_token = kv_bytes_per_token(spec, kv_cache_dtype, dtype_bytes)
    kv_layers = sum(1 for letter in spec.layer_pattern if letter in "FSC")
    per_layer_token = kv_bytes_per_layer_token(spec, kv_cache_dtype, dtype_bytes) if kv_layers else 0
    full_layer_token = kv_bytes_per_layer_token(spec, kv_cache_dtype, dtype_bytes, full=True) if kv_layers else 0
    conv = DTYPE_BYTES.get(spec.dtype, 2)
    ssm = DTYPE_BYTES[spec.mamba.ssm_dtype] if spec.mamba is not None and spec.mamba.ssm_dtype else conv
    state = mamba_state_bytes(spec, 1, conv, ssm)
    sequences = [
        SequenceCost(tokens=n, bytes=sequence_bytes(spec, n, per_layer_token, state, full_layer_token)) for n in lengths
    ]
    kinds = {"F": "full", "S": "sliding_window", "C": "chunked_local", "M": "mamba"}
    by_kind = {name: spec.layer_pattern.count(letter) for letter, name in kinds.items() if letter in spec.layer_pattern}
    hybrid = set(spec.layer_pattern) - {"F"}
    result = Estimate(
        bytes_per_token=per_token,
        sequences=sequences,
        total_bytes=sum(s.bytes for s in sequences) * num_seqs,
        num_seqs=num_seqs,
        layers=by_kind,
        state_bytes_per_sequence=state * spec.layer_pattern.count("M"),
        note=(
            "bytes_per_token counts every KV layer; a sequence keeps only the window/chunk in "
            "sliding-window and chunked layers and a fixed state in Mamba layers (vLLM adds block rounding "
            "and in-flight tokens: see `planner recommend`)"
            if hybrid
            else None
        ),
    )
    if output is OutputFormat.json:
        print_json(result)
    elif output is OutputFormat.yaml:
        print_yaml(result)
    else:
        console.print(f"KV cache per token: [bold]{format_bytes(per_token)}[/] ({per_token:,} B, every KV layer)")
        if result.note:
            console.print(f"  layers: {', '.join(f'{n} {k}' for k, n in by_kind.items())}; {result.note}")
        for s in sequences:
            console.print(f"  {s.tokens:>9,} tokens: {format_bytes(s.bytes)}")
        suffix = f" ({num_seqs} sequences of each length)" if num_seqs > 1 else ""
        console.print(f"  together: [bold]{format_bytes(result.total_bytes)}[/]{suffix}")
