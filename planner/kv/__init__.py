"""KV-cache arithmetic identical to vLLM's: per-layer pages, hybrid groups, blocks, capacity."""
