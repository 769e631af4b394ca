"""A third-party anneal plugin used by the integration tests."""
