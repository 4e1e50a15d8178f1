"""Servers of the proxy tests: each on 127.0.0.1 in a background thread, stopped when its test ends."""

from __future__ import annotations

import pytest

from interp.serve.app import start


@pytest.fixture
def serving():
    """``serving(app) -> url``: serve an ASGI app on 127.0.0.1 for the test's duration."""
    running = []

    def serve(app):
        r = start(app)
        running.append(r)
        return r.url

    yield serve
    for r in running:
        r.stop()
