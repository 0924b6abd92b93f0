"""What kv-planner knows about vLLM itself: releases, serving flags, command lines, logs."""
