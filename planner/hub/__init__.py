"""Model resolution machinery: local directories, the Hugging Face Hub and its cache.

The public entry point is :func:`planner.hub.resolve.resolve_model`; the CLI also uses
:func:`planner.hub.progress.hub_progress` for the progress display. Modules:

- ``resolve``: the order (local path, built-in catalog, Hub) and the per-model memo around it;
- ``settings``: endpoint, cache folders, token and offline mode, read from the environment per call;
- ``local``: a model given as a local path;
- ``remote``: config.json and safetensors headers from the Hub (or its cache) via huggingface_hub;
- ``store``: the on-disk memo of checkpoint summaries (per commit, in the HF assets cache);
- ``memo``: the in-memory memo, one lookup in flight per model, the webhook's deadline;
- ``translate``: huggingface_hub / HTTP failures -> planner.errors, with actionable messages;
- ``progress``: the rich progress display (terminal only).
"""
