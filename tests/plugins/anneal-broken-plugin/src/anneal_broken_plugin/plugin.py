"""Fails on import, on purpose."""

raise RuntimeError("anneal-broken-plugin is broken on purpose")
