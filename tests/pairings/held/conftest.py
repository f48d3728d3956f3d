"""The task-less backend every held-task test runs against (tests/held_support.py), once over
HTTP and once on stdio: `untasked` yields its `[[upstream]]` table and its events file."""

import pytest
from held_support import backend, start_untasked_server


@pytest.fixture(params=["http", "stdio"])
def untasked(request, tmp_path):
    events = tmp_path / "events.jsonl"
    if request.param == "stdio":
        yield backend("stdio", None, events), events
        return
    server = start_untasked_server(events)
    try:
        yield backend("http", server.url, events), events
    finally:
        server.stop()
