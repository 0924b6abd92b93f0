"""Policy: schema, decisions (deny > mutate > warn > allow) and JSON patches for vLLM workloads."""
