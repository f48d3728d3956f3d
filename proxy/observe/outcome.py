"""The one place a call's outcome is recorded (docs/architecture.md "The request path").

The entry hands every answered `Call` and its `Outcome` here, once, at the end of the request:
`mcp_tasks_proxy_requests_total`, the failure counts and the tool results (`/metrics`,
`proxy/observe/tools.py`), the status page's recorder
(and through it the lasting figures), the repairs, the request's trace. Lower layers (faces,
pairings, upstream connectors) report what happened and never count. Failures are classified
here, and only for outcomes that are not ok (`proxy/observe/failures.py`, `translators.failures`).
"""

from __future__ import annotations

from translators.failures import Failure
from translators.tool_results import TOOL_METHODS

from ..faces.call import CANCELLED, OWN_SESSION, REFUSAL, RELAYED_SESSION, TRANSLATED, Call, Outcome
from ..metrics import method_label
from .failures import of_relayed, of_session_answer, shown_detail
from .hooks import TRACE
from .recorder import default_failure
from .tools import record_tool


def failure_of(call: Call, outcome: Outcome) -> Failure:
    """The failure of an outcome that is not ok: the one the answering layer gave, else read from
    the answer the client got (a relayed error's body, a proxy session's refusal), else from the label."""
    if outcome.failure is not None:
        return outcome.failure
    answer = outcome.answer
    if answer is None or outcome.source == TRANSLATED:
        return default_failure(outcome.label, outcome.reason, call.method)
    if outcome.source == OWN_SESSION:
        return of_session_answer(call.request.get(REFUSAL), answer, call.method)
    return of_relayed(answer, call.method, session_wire=outcome.source == RELAYED_SESSION)


def record(call: Call, outcome: Outcome) -> None:
    """Record one answered call under its backend (`call.backend`), its face and dialects, its
    client and the repairs made for it; a client that left is no failure."""
    backend = call.backend
    metrics = backend.metrics
    backend_dialect = call.backend_dialect or backend.dialect
    face = call.face
    client_dialect = call.dialect or face
    message = call.message
    method = message.method if message is not None else None
    label = outcome.label
    reason = outcome.reason if outcome.source != OWN_SESSION else shown_detail(call.request.get(REFUSAL))
    metrics.request(face, backend_dialect, method, label)
    failure = None
    if label != "ok" and label != CANCELLED:
        failure = failure_of(call, outcome)
        metrics.failure(backend.name, client_dialect, backend_dialect, failure)
    metrics.recorder.request(backend.name, client_dialect, backend_dialect, label, call.client,
                             None if label == "ok" else method_label(method), reason, failure=failure, repairs=call.repairs)
    if call.repairs:
        metrics.repaired(client_dialect, call.repairs)
    if method in TOOL_METHODS:
        record_tool(call, outcome, failure, client_dialect)
    trace = TRACE.get()
    if trace is not None:
        if outcome.source == TRANSLATED:
            trace.result(outcome.answer)
        trace.answered(backend.name, client_dialect, backend_dialect, label)
