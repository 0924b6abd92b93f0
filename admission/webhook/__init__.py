"""The admission webhook: AdmissionReview v1 over TLS (FastAPI + uvicorn), decisions from planner.policy.

Modules: ``review`` (wire models), ``handler`` (request bytes -> response bytes), ``app`` (HTTP surface),
``tls`` (SSLContext with reload), ``caches`` (Namespaces/Nodes informers), ``metrics``, ``server``
(process assembly), ``cli`` (``python -m admission webhook``). See docs/webhook.md.
"""
