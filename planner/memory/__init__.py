"""The per-GPU memory budget vLLM computes at startup, term by term."""
