"""Checking the planner against real vLLM startups: records, validation, log parsing, corrections."""
