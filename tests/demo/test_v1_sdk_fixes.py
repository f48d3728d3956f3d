"""The reference v1 server's workarounds for mcp 1.30 (``proxy/demo/servers/v1_sdk_fixes.py``), checked
on the SDK's own classes in the ``mcp-v1`` peer environment."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers

CHECK = Path(__file__).resolve().parents[1] / "peers" / "result_wakeup_check.py"


async def _result_wakeup_check(store: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        str(ensure_peer_env("mcp-v1")), str(CHECK), store, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()[-2000:]
    return json.loads(out)


async def test_tasks_result_answers_a_task_that_ended_before_it_began_to_wait():
    """The work ends after `tasks/result` read its task as `working` and before it waits for an
    update (in a real run: just after the client answered the task's question). On mcp 1.30's own
    store `tasks/result` never answers; on the reference server's store it answers the result at
    once, with the related-task `_meta`."""
    fixed, sdk = await asyncio.gather(_result_wakeup_check("fixed"), _result_wakeup_check("sdk"))
    assert fixed == {
        "hung": False,
        "task_id": fixed["task_id"],
        "result": {
            "_meta": {"io.modelcontextprotocol/related-task": {"taskId": fixed["task_id"]}},
            "content": [{"type": "text", "text": "done"}],
            "isError": False,
        },
    }
    assert sdk == {"hung": True, "task_id": sdk["task_id"], "result": None}
