"""Kubernetes workloads as plain dicts: pod templates, vLLM containers, GPU type and count.

Pure library code: no Kubernetes client. Entry point: :func:`planner.k8s.inspect.inspect_workload`.
"""
