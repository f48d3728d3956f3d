"""Decisions the proxy takes on the client's behalf, as pure functions of what it knows.

Source: docs/behaviour.md §4.2 (who creates a task for a v2 client in front of a v1 backend).
"""

from __future__ import annotations

from typing import Literal

from .protocol import TaskSupport

Creation = Literal["task", "sync", "reject", "wait"]
OptionalTools = Literal["task", "sync"]
RequiredWithoutExtension = Literal["reject", "wait"]


def creation_decision(
    *,
    declared: bool,
    support: TaskSupport,
    backend_offers_tasks: bool,
    optional_tools: OptionalTools = "task",
    required_without_extension: RequiredWithoutExtension = "reject",
) -> Creation:
    """How to run a v2 client's `tools/call` on a v1 backend (docs/behaviour.md §4.2).

    * "task": upstream call with `params.task`, answer a flat `CreateTaskResult`;
    * "sync": plain upstream call, answer its result;
    * "reject": answer -32021 naming the tasks extension;
    * "wait": run as an upstream task and answer the final result (config
      `required_without_extension = "wait"`).

    | declared | required | optional              | forbidden / absent |
    |----------|----------|-----------------------|--------------------|
    | yes      | task     | `optional_tools`      | sync               |
    | no       | reject or wait | sync            | sync               |

    A backend that does not declare `tasks.requests.tools.call` is always called plainly.
    """
    if not backend_offers_tasks or support == "forbidden":
        return "sync"
    if support == "required":
        if declared:
            return "task"
        return "wait" if required_without_extension == "wait" else "reject"
    return optional_tools if declared else "sync"
