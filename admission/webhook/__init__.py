"""Package being written."""
