"""Command line tools: dump, verify, recover."""
