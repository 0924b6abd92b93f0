"""Peak activation memory of vLLM's profiling run (the "torch peak memory increase").

vLLM profiles with one dummy forward pass of ``max_num_batched_tokens`` tokens spread over
``num_reqs = min(max_num_seqs, max_num_batched_tokens)`` requests, then (last PP stage only) a
sampler warm-up on ``num_reqs`` rows of logits (``gpu_model_runner.profile_run`` /
``_dummy_sampler_run``). The two peaks happen at different times, so torch's peak is the larger:

* forward: the activations alive inside one decoder layer — residual, hidden, fused QKV, attention
  output, fused gate/up and the MLP output — ``tokens x width x dtype_bytes``; for MoE layers the
  fused-MoE workspace ``tokens x top_k x (2 x expert_width + hidden)``;
* sampler: fp32 logits, probabilities and sort buffers, ``num_reqs x vocab x bytes_per_logit``. What
  the sampler keeps per logit depends on the release's top-k/top-p kernel (``Release.sampler_kernel``,
  ``v1/sample/ops/topk_topp_sampler.py``): the PyTorch path (0.12-0.16, and 0.17-0.20 below 8 requests)
  sorts the full logits (``logits.sort`` -> fp32 values and int64 indices, plus the radix sort's double
  buffers) and scatters them back; the Triton kernel (0.17+, 8 requests or more) masks in place; FlashInfer
  (default when installed up to 0.11, on by default from 0.21) samples from the logits in one kernel.
* From 0.14 unquantized fused MoE runs through the modular kernel, whose workspaces come from the
  persistent ``WorkspaceManager`` (``v1/worker/workspace.py``: grows, never frees). They are still
  allocated when the sampler warms up, so that peak is ``workspace + sampler``, not the sampler alone.

A cold torch.compile runs inside the profile run, before the forward (the first call of the compiled model
is the profile batch): from 0.10.2 (not 0.11.0) Inductor autotunes at compile time on random copies of each
Triton kernel's inputs (:func:`compile_example_bytes`, ``Release.compile_autotune_examples``), so the torch
peak is at least the largest of those live at once: the embedding table's copy for the gather kernel. That
happens before any workspace of the forward exists, so it is a third candidate of the peak, not an addend.
A warm compile cache loads the compiled graphs and skips it (the plan's KV band says how much that frees).

A pipeline stage after the first also holds the hidden states and residual it received
(``IntermediateTensors``: ``2 x tokens x hidden x dtype_bytes``) through both peaks.

Model Runner V2 (``v1/worker/gpu/model_runner.py``: dense models from 0.26, every model from 0.29) runs
the same forward, but its sampler warm-up is another program (:func:`runner_v2_sampler_bytes`): the dummy
requests carry the sampling states' defaults (temperature 0, no top-k/top-p, min-p, penalties or logprobs),
so 0.26-0.32 sample greedily from the logits in the model dtype and keep nothing per logit beyond them;
0.33 adds a second pass with ``SamplingParams.for_sampler_warmup`` that pays the fp32 pipeline. Its
penalty state (``output_bin_counts``: one int32 per request slot and vocabulary entry) is allocated when
the model loads, so it is no activation: :func:`runner_v2_sampler_state_bytes`.

The V0 engine (``worker/model_runner.py`` ``profile_run`` -> ``_dummy_run``) runs the same forward eagerly,
without torch.compile, so its peak is the live set of plain PyTorch in the MLP, not the fitted V1 figure
(about 22% lower for Llama-3.1-8B): see :func:`eager_width` (which tensors the model file's MLP keeps, and
the out-of-place all-reduce under TP). Its dummy sampling
asks for ``top_k = vocab - 1, top_p = 0.99``, which takes V0's sort path (``layers/sampler.py``
``_apply_top_k_top_p`` sorts and scatters the full fp32 logits) in every V0 release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.memory.coefficients import MemoryCoefficients
from planner.models.spec import ModelSpec


@dataclass(frozen=True)
class ActivationPeak:
    forward_bytes: int
    sampler_bytes: int
    compile_bytes: int = 0
    """a cold compile's autotuning inputs (:func:`compile_example_bytes`), 0 where nothing is compiled"""

    @property
    def peak_bytes(self) -> int:
        return max(self.forward_bytes, self.sampler_bytes, self.compile_bytes)


def dense_width(model: ModelSpec, tp: int) -> float:
    """Activation elements per token alive at the peak of a dense layer, on one TP rank."""
    kv_heads = max(1, model.num_kv_heads // tp) if model.num_kv_heads else 0
    qkv = model.num_attention_heads / tp * model.head_dim + kv_heads * (model.head_dim + model.head_size_v)
    mlp = (3 if model.mlp_gated else 2) * model.intermediate_size / tp
    return 2 * model.hidden_size + qkv + mlp


# vLLM model files whose MLP rebinds its input to each result (llama.py LlamaMLP.forward: ``x, _ =
# gate_up_proj(x); x = act_fn(x); x, _ = down_proj(x)``), so gate_up is freed before the down projection;
# Phi-3 subclasses LlamaForCausalLM and Mistral is served by llama.py (models/registry.py). The other dense
# MLPs keep it in a local through down_proj (qwen2.py Qwen2MLP, which Qwen3 reuses, gemma.py, granite.py,
# deepseek_v2.py ...: ``gate_up, _ = gate_up_proj(x); x = act_fn(gate_up)``). Read in 0.6.4.post1, 0.7.2,
# 0.8.5, 0.9.0 and 0.10.2.
_MLP_FREES_GATE_UP = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM"})


def eager_width(model: ModelSpec, tp: int) -> float:
    """Activation elements per token alive at the peak of one decoder layer run eagerly (V0).

    Held by the callers while a layer's MLP runs: the layer's input (the model's loop keeps it until the layer
    returns; ``input_layernorm`` normalises it in place), the residual and the post-attention hidden states:
    ``3 x hidden``. In the MLP, while the activation (``SiluAndMul``) writes its output, gate_up is alive too:
    ``3 x hidden + (gate_up + act) x intermediate / tp``, the peak of llama.py's MLP (the #10517 logs,
    tests/core/test_profiling_causes.py, agree within 0.5%). While the down projection writes its output
    (``hidden``), an MLP that keeps gate_up holds ``4 x hidden + (gate_up + act) x intermediate / tp``, llama.py's
    ``4 x hidden + intermediate / tp``. Under TP the row-parallel output is all-reduced out of place
    (``distributed/parallel_state.py`` ``_all_reduce_out_place``: ``pynccl.py`` ``all_reduce`` and the custom
    all-reduce return a new tensor) while its input is still referenced: one more ``hidden`` at the down
    projection and at ``o_proj``. In attention: the layer's input, the residual, fused QKV, the attention output
    and o_proj's output. The largest of these is the layer's peak; no fitted constant.
    """
    kv_heads = max(1, model.num_kv_heads // tp) if model.num_kv_heads else 0
    hidden = model.hidden_size
    reduced = hidden if tp > 1 else 0
    q = model.num_attention_heads / tp * model.head_dim
    qkv = q + kv_heads * (model.head_dim + model.head_size_v)
    attention = 3 * hidden + qkv + model.num_attention_heads / tp * model.head_size_v + reduced
    inter = model.intermediate_size / tp
    gate_up = 2 if model.mlp_gated else 1
    at_act = 3 * hidden + (gate_up + 1) * inter
    if model.architecture in _MLP_FREES_GATE_UP:
        at_down = 4 * hidden + inter + reduced
    else:
        at_down = 4 * hidden + (gate_up + 1) * inter + reduced
    return max(attention, at_act, at_down)


def moe_width(model: ModelSpec, tp: int) -> float:
    moe = model.moe
    if moe is None:
        return 0.0
    return moe.experts_per_token * (2 * moe.moe_intermediate_size / tp + model.hidden_size)


def sampler_kernel_in_force(kernel: str, env: Mapping[str, str]) -> str:
    """The release's top-k/top-p kernel as the environment leaves it. Up to 0.11.0
    (``flashinfer_if_installed``) ``TopKTopPSampler`` takes FlashInfer only when it is installed and
    ``VLLM_USE_FLASHINFER_SAMPLER`` is not false; otherwise ``forward_native`` -> ``apply_top_k_top_p``,
    the PyTorch sort + scatter path (``v1/sample/ops/topk_topp_sampler.py``, which logs "Falling back to
    the PyTorch-native implementation of top-p & top-k sampling"). ``VLLM_USE_FLASHINFER_SAMPLER=0``
    plans that path; an install without FlashInfer takes it too."""
    disabled = env.get("VLLM_USE_FLASHINFER_SAMPLER", "").strip().lower() in ("0", "false")
    return "sort_scatter" if kernel == "flashinfer_if_installed" and disabled else kernel


def sampler_bytes_per_logit(coefficients: MemoryCoefficients, kernel: str, num_reqs: int) -> float:
    """Bytes the sampler warm-up keeps per (dummy request x vocabulary entry) for the release's kernel
    (``Release.sampler_kernel``: flashinfer_if_installed, sort_scatter, triton_batch8, flashinfer).

    The fitted constant is the Triton path's (the calibration releases run it); the sort path adds the
    sorted copy and its indices (``sampler_sort_extra_bytes_per_logit``). FlashInfer is planned with the
    fitted constant (fp32 logits, probabilities and the sampling buffer are the same order)."""
    base = coefficients.sampler_bytes_per_logit
    sorts = kernel == "sort_scatter" or (kernel == "triton_batch8" and num_reqs < 8)
    return base + coefficients.sampler_sort_extra_bytes_per_logit if sorts else base


def _padded_vocab(model: ModelSpec) -> int:
    # model_executor/layers/vocab_parallel_embedding.py: the LM head's rows are padded to a multiple of 64
    # (DEFAULT_VOCAB_PADDING_SIZE); compute_logits slices the padding off as a view, so it stays allocated.
    return -(-model.vocab_size // 64) * 64


def runner_v2_flashinfer_sampler(env: Mapping[str, str]) -> bool:
    """Model Runner V2 samples with FlashInfer's top-k/top-p kernel unless ``VLLM_USE_FLASHINFER_SAMPLER``
    is off (0.33 ``v1/sample/ops/topk_topp_sampler.py`` flashinfer_sampler_supported; it also refuses GPUs
    with 16 SMs or fewer and capabilities FlashInfer lacks, which the plan does not know)."""
    return env.get("VLLM_USE_FLASHINFER_SAMPLER", "").strip().lower() not in ("0", "false")


def runner_v2_sampler_bytes(
    model: ModelSpec,
    *,
    num_reqs: int,
    tokens: int,
    tp: int,
    dtype_bytes: int,
    warmup_pass: bool,
    flashinfer: bool = True,
) -> int:
    """Bytes alive at the peak of Model Runner V2's sampler warm-up (``_dummy_sampler_run``).

    Held through it (``profile_run``): the forward's output ``[tokens, hidden]`` and the rows gathered at
    ``logits_indices`` (``InputBatch.make_dummy``: one per dummy request, ``[num_reqs, hidden]``).
    ``compute_logits`` (``model_executor/layers/logits_processor.py``) projects them in the model dtype
    (``head_dtype`` is the model dtype for generate models): ``[num_reqs, padded vocab]``. With TP > 1 each
    rank holds its vocabulary shard while the all-gather fills a ``[tp x num_reqs, vocab / tp]`` buffer and
    reshapes it into a contiguous ``[num_reqs, vocab]`` copy (``device_communicators/cuda_communicator.py``
    all_gather), so ``(2 + 1/tp)`` copies of the logits are alive for a moment.

    The sampler itself (``v1/worker/gpu/sample/sampler.py``) on the dummy batch, whose request slots hold
    the states' initial values (``sample/states.py``: temperature 0, top_k = vocab, top_p = 1, min_p 0, no
    logprobs; no penalties, bias or bad words): 0.26 skips every processing kernel, 0.27-0.32 return the
    logits untouched (``_requires_logits_processing`` / ``needs_logits_processing`` are false), no top-k/
    top-p mask is applied and ``gumbel_sample`` takes a greedy argmax with ``[num_reqs, vocab / 1024]``
    scratch: nothing per logit. 0.33 then adds every request with ``SamplingParams.for_sampler_warmup``
    (temperature 0.9, top_k 50, top_p 0.9, min_p, penalties, logit bias, bad words, 5 logprobs) and samples
    again (``warmup_pass``): ``apply_sampling_params`` copies the logits to fp32 (4 bytes a logit), and
    FlashInfer's ``top_k_top_p_sampling_from_logits`` (``top_k_first``) keeps a masked fp32 copy and its
    softmax (8 more); without FlashInfer the Triton top-k/top-p kernel masks in place. The logprobs kernel
    (``sample/logprob.py`` compute_token_logprobs) never materialises ``[num_reqs, vocab]``.
    """
    padded = _padded_vocab(model)
    held = (tokens + num_reqs) * model.hidden_size * dtype_bytes
    logits = num_reqs * padded * dtype_bytes
    peak = logits * (2 + 1 / tp) if tp > 1 else float(logits)
    if warmup_pass:
        per_logit = 4 + (8 if flashinfer else 0)
        peak = max(peak, logits + num_reqs * model.vocab_size * per_logit)
    return int(held + peak)


def runner_v2_sampler_state_bytes(model: ModelSpec, max_num_seqs: int) -> int:
    """Model Runner V2's persistent per-slot sampler state on the last pipeline stage, allocated when the
    model loads (``load_model`` builds the Sampler and the StructuredOutputsWorker): ``PenaltiesState``
    (``sample/penalties.py``) ``output_bin_counts`` ``[max_num_seqs, vocab]`` and ``prompt_bin_mask``
    ``[max_num_seqs, vocab / 32]``, and the grammar bitmask ``[max_num_seqs, vocab / 32]``
    (``structured_outputs.py``), all int32. vLLM counts it from 0.27, whose profiling takes everything
    consumed since ``init_device`` (``Release.non_kv_accounting``); 0.26 counts it in no term."""
    words = -(-model.vocab_size // 32)
    return max_num_seqs * (model.vocab_size + 2 * words) * 4


def sampler_held_bytes(model: ModelSpec, *, num_reqs: int, tokens: int, dtype_bytes: int) -> int:
    """What the V1 runner's profile run keeps alive through its sampler warm-up besides the logits and the
    sampler's own buffers: ``profile_run`` (``v1/worker/gpu_model_runner.py``) holds the forward's output
    ``hidden_states`` ``[tokens, hidden]`` and the rows gathered for sampling ``[num_reqs, hidden]`` until
    ``_dummy_sampler_run`` returns. The bytes per logit (``sampler_bytes_per_logit``) are fitted on top of
    it, so the constant no longer stands in for a model's hidden size (a Llama and a Qwen of one vocabulary
    size differ here)."""
    return (tokens + num_reqs) * model.hidden_size * dtype_bytes


def moe_workspace_bytes(model: ModelSpec, tokens: int, tp: int, dtype_bytes: int) -> int:
    """The modular fused-MoE kernel's two workspaces for ``tokens`` (TritonExperts.workspace_shapes):
    ``(M, top_k, max(I, H))`` and ``(M, top_k, max(2I, H))``, I the expert width on the rank."""
    moe = model.moe
    if moe is None:
        return 0
    inter, hidden = moe.moe_intermediate_size / tp, model.hidden_size
    return int(tokens * moe.experts_per_token * (max(inter, hidden) + max(2 * inter, hidden)) * dtype_bytes)


def compile_example_bytes(model: ModelSpec, *, tokens: int, tp: int, dtype_bytes: int) -> int:
    """Torch memory of Inductor's compile-time autotuning of the first compiled graph (a cold compile).

    vLLM compiles with ``InductorStandaloneAdaptor`` (``compilation/backends.py``), and torch's
    ``standalone_compile`` sets ``triton.autotune_at_compile_time`` (``_inductor/standalone_compile.py``,
    torch 2.8-2.13), so codegen (``_inductor/codegen/wrapper.py`` ``generate_example_arg_value``,
    ``generate_and_run_autotune_block``) runs each Triton kernel once on ``rand_strided`` copies of its inputs
    and outputs, at the size hint of the first call (the profile batch, ``tokens``), each freed after the last
    kernel that reads it. Graph inputs are copied too, weights included: the gather of the token embeddings
    reads the whole table, one TP shard of the padded vocabulary (``VocabParallelEmbedding``,
    :func:`_padded_vocab`) x hidden in the model dtype. Alive with it: the kernel's outputs, the gathered
    rows that stay the residual stream and their RMS-normed copy for the first layer's input, two
    ``[tokens, hidden]`` buffers. Matrix products are cuBLAS/vLLM custom ops, not Triton kernels, so their
    weights are not copied; everything else a graph's kernels touch is the size of the forward's own live set.
    """
    table = _padded_vocab(model) // tp * model.hidden_size * dtype_bytes
    return int(table + 2 * tokens * model.hidden_size * dtype_bytes)


def activation_peak(
    model: ModelSpec,
    *,
    coefficients: MemoryCoefficients,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int,
    dtype_bytes: int,
    last_stage: bool,
    receives_from_previous_stage: bool = False,
    sampler_kernel: str = "triton_batch8",
    moe_workspace_held: bool = False,
    eager_engine: bool = False,
    runner_v2: bool = False,
    runner_v2_sampler_warmup: bool = False,
    flashinfer_sampler: bool = True,
    fp8_moe_workspace_held: bool = False,
    compiles_embedding: bool = False,
) -> ActivationPeak:
    """``eager_engine``: the V0 engine's profile run (eager forward, sort-path sampler). ``runner_v2``: Model
    Runner V2 runs the model: the same forward, its own sampler warm-up (:func:`runner_v2_sampler_bytes`;
    ``runner_v2_sampler_warmup`` is ``Release.runner_v2_sampler_warmup``, ``flashinfer_sampler`` whether
    FlashInfer's sampler is on). ``fp8_moe_workspace_held``: an FP8 MoE's TritonExperts workspaces come from
    the WorkspaceManager too (``Release.fp8_moe_workspace_held`` on SM 8.9). ``compiles_embedding``: this stage
    compiles cold with autotuning inputs and its compiled graph starts at the token embedding
    (:func:`compile_example_bytes`)."""
    tokens = max_num_batched_tokens
    received = 2 * tokens * model.hidden_size * dtype_bytes if receives_from_previous_stage else 0
    if eager_engine:
        forward = tokens * eager_width(model, tp) * dtype_bytes
        sampler_kernel = "sort_scatter"
    else:
        forward = coefficients.forward_bytes_per_token_width * tokens * dense_width(model, tp) * dtype_bytes
    if model.moe is not None:
        forward = max(
            forward, coefficients.moe_bytes_per_token_expert_width * tokens * moe_width(model, tp) * dtype_bytes
        )
    sampler = 0.0
    if last_stage:
        num_reqs = min(max_num_seqs, max_num_batched_tokens)
        if runner_v2:
            sampler = float(
                runner_v2_sampler_bytes(
                    model,
                    num_reqs=num_reqs,
                    tokens=tokens,
                    tp=tp,
                    dtype_bytes=dtype_bytes,
                    warmup_pass=runner_v2_sampler_warmup,
                    flashinfer=flashinfer_sampler,
                )
            )
        else:
            sampler = sampler_bytes_per_logit(coefficients, sampler_kernel, num_reqs) * num_reqs * model.vocab_size
            if not eager_engine:
                sampler += sampler_held_bytes(model, num_reqs=num_reqs, tokens=tokens, dtype_bytes=dtype_bytes)
        quantization = model.quantization
        unquantized = moe_workspace_held and quantization is None
        fp8 = fp8_moe_workspace_held and quantization is not None and quantization.method == "fp8"
        if unquantized or fp8:
            # vllm 0.14+ model_executor/layers/fused_moe/modular_kernel.py: workspaces from
            # current_workspace_manager() outlive the forward pass; 0.29 FP8 MoE on SM 8.9 takes the same
            # modular kernel with TritonExperts (other quantized MoE kernels not verified).
            sampler += moe_workspace_bytes(model, tokens, tp, dtype_bytes)
    compile_bytes = (
        compile_example_bytes(model, tokens=tokens, tp=tp, dtype_bytes=dtype_bytes) if compiles_embedding else 0
    )
    return ActivationPeak(
        forward_bytes=int(forward) + received,
        sampler_bytes=int(sampler) + received if last_stage else 0,
        compile_bytes=compile_bytes,
    )
