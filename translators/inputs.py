"""Requests for input: v1 server→client JSON-RPC requests ↔ v2 `inputRequests` / `inputResponses`.

v1 (core 2025-11-25): the server sends `elicitation/create`, `sampling/createMessage` or
`roots/list` as JSON-RPC requests (with related-task `_meta` when they belong to a task) and the
client POSTs a JSON-RPC response with the same id. v2 (SEP-2663 tasks/get, tasks/update; core
2026-07-28 MRTR): the request appears as `{method, params}` under an opaque key, and the answer
comes back as the bare result under the same key. Keys are minted by the proxy and never reused
within a task or an MRTR exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import jsonrpc
from .differences import add_related_task, add_result_type, strip_related_task
from .errors import INVALID_PARAMS, McpError
from .model import InputRequest
from .protocol import INPUT_REQUEST_METHODS, META_RELATED_TASK


def related_task_id(message: Mapping[str, Any]) -> str | None:
    """The task a server request or notification says it belongs to: `params._meta[related-task]
    .taskId`, or the same key at the JSON-RPC envelope level (FastMCP 3 puts it there, docs/wire.md §7)."""
    for holder in ((message.get("params") or {}).get("_meta"), message.get("_meta")):
        if isinstance(holder, dict):
            related = holder.get(META_RELATED_TASK)
            task_id = related.get("taskId") if isinstance(related, dict) else None
            if isinstance(task_id, str):
                return task_id
    return None


def is_input_request(message: Mapping[str, Any]) -> bool:
    """Whether a server→client request is one that can become an input request (elicitation,
    sampling, roots)."""
    return message.get("method") in INPUT_REQUEST_METHODS


def input_request_from_v1(message: Mapping[str, Any]) -> InputRequest:
    """A v1 server request as a v2 `InputRequest` `{method, params}`, related-task `_meta` removed
    (SEP-2663: input request params carry no related-task key). Inverse: `input_request_to_v1`."""
    return InputRequest(method=str(message.get("method")), params=strip_related_task(dict(message.get("params") or {})))


def input_request_to_v1(request: InputRequest, request_id: jsonrpc.RequestId, task_id: str | None) -> dict[str, Any]:
    """A v2 `InputRequest` as a v1 server→client JSON-RPC request, with related-task `_meta` when it
    belongs to a task (core 2025-11-25: task-related requests MUST carry it)."""
    params = add_related_task(request.params, task_id) if task_id is not None else dict(request.params)
    return jsonrpc.request(request_id, request.method, params)


def input_response_to_v1(request_id: jsonrpc.RequestId, value: Any) -> dict[str, Any]:
    """A v2 `inputResponses` value as the JSON-RPC response a v1 server waits for (same id)."""
    return jsonrpc.result_response(request_id, value)


def input_response_from_v1(message: Mapping[str, Any], method: str) -> dict[str, Any] | McpError:
    """A v1 client's JSON-RPC answer to an input request as an `inputResponses` value, or the
    `McpError` it carried. An error answer to `elicitation/create` becomes `{action: "cancel"}`
    (docs/behaviour.md §5.4), since `inputResponses` has no slot for errors."""
    if "error" in message:
        if method == "elicitation/create":
            return {"action": "cancel"}
        error = message.get("error") or {}
        return McpError(error.get("code", -32603), str(error.get("message", "")), error.get("data"))
    result = message.get("result")
    return result if isinstance(result, dict) else {}


def read_input_responses(params: Mapping[str, Any], *, required: bool = False) -> dict[str, Any]:
    """`params.inputResponses` as a dict of key → result object.

    Raises `McpError(-32602)` when it is present but not an object, when a value is not an
    object, or when `required` and it is absent.
    """
    responses = params.get("inputResponses")
    if responses is None:
        if required:
            raise McpError(INVALID_PARAMS, "inputResponses is required")
        return {}
    if not isinstance(responses, dict):
        raise McpError(INVALID_PARAMS, "inputResponses must be an object mapping keys to results")
    for key, value in responses.items():
        if not isinstance(value, dict):
            raise McpError(INVALID_PARAMS, f"inputResponses[{key!r}] must be an object (the request's result)")
    return responses


def input_required_result(requests: Mapping[str, InputRequest], request_state: str) -> dict[str, Any]:
    """The MRTR `InputRequiredResult` (core 2026-07-28): `resultType: "input_required"`,
    `inputRequests` (key → `{method, params}`) and the sealed `requestState`."""
    return add_result_type(
        {"inputRequests": {key: req.to_wire() for key, req in requests.items()}, "requestState": request_state},
        "input_required",
    )


def input_key(prefix: str, number: int) -> str:
    """The `number`-th key of a task or exchange: `<prefix><number>`, never reused (a counter)."""
    return f"{prefix}{number}"


def strip_mrtr(params: Mapping[str, Any]) -> dict[str, Any]:
    """Params without the MRTR members `inputResponses` and `requestState`, which a session-wire
    backend does not know (they are answered by the proxy)."""
    return {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}


def mrtr_retry_params(params: Mapping[str, Any], round_result: Mapping[str, Any], responses: Mapping[str, Any]) -> dict[str, Any]:
    """The params of an MRTR retry (core 2026-07-28, MRTR): the original `params` with
    `inputResponses` (by input key) and the `requestState` of the `InputRequiredResult`
    `round_result`, when it had one."""
    retry = {**params, "inputResponses": dict(responses)}
    if "requestState" in round_result:
        retry["requestState"] = round_result["requestState"]
    return retry
