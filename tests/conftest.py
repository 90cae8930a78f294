"""Shared pytest configuration."""

# Old-API programs that the migration checker reads; they are data, not tests.
collect_ignore_glob = ["migrate_corpus/*"]
