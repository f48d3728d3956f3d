"""docs/behaviour.md §4.2 "Creating tasks": who creates a task for a v2 client in front of a v1 backend.

Every cell of the table, for every combination of the two config values, plus a backend that does
not declare `tasks.requests.tools.call` (docs/wire.md §2.2: the client MUST NOT augment then).
"""

from __future__ import annotations

import itertools

import pytest

from translators.capabilities import task_support
from translators.policy import creation_decision

OPTIONAL_TOOLS = ("task", "sync")
REQUIRED_WITHOUT_EXTENSION = ("reject", "wait")
CONFIGS = list(itertools.product(OPTIONAL_TOOLS, REQUIRED_WITHOUT_EXTENSION))


def _decide(declared: bool, support: str, optional_tools: str, required_without_extension: str, *, offers: bool = True) -> str:
    return creation_decision(
        declared=declared,
        support=support,  # type: ignore[arg-type]
        backend_offers_tasks=offers,
        optional_tools=optional_tools,  # type: ignore[arg-type]
        required_without_extension=required_without_extension,  # type: ignore[arg-type]
    )


# --- declared: yes ---------------------------------------------------------------------------


@pytest.mark.parametrize(("optional_tools", "required_without_extension"), CONFIGS)
def test_declaring_client_calling_required_tool_gets_upstream_task(optional_tools, required_without_extension):
    assert _decide(True, "required", optional_tools, required_without_extension) == "task"


@pytest.mark.parametrize("required_without_extension", REQUIRED_WITHOUT_EXTENSION)
def test_declaring_client_calling_optional_tool_follows_optional_tools_task(required_without_extension):
    assert _decide(True, "optional", "task", required_without_extension) == "task"


@pytest.mark.parametrize("required_without_extension", REQUIRED_WITHOUT_EXTENSION)
def test_declaring_client_calling_optional_tool_follows_optional_tools_sync(required_without_extension):
    assert _decide(True, "optional", "sync", required_without_extension) == "sync"


@pytest.mark.parametrize(("optional_tools", "required_without_extension"), CONFIGS)
def test_declaring_client_calling_forbidden_tool_gets_plain_call(optional_tools, required_without_extension):
    assert _decide(True, "forbidden", optional_tools, required_without_extension) == "sync"


# --- declared: no ----------------------------------------------------------------------------


@pytest.mark.parametrize("optional_tools", OPTIONAL_TOOLS)
def test_non_declaring_client_calling_required_tool_is_rejected_with_32021_by_default_config(optional_tools):
    assert _decide(False, "required", optional_tools, "reject") == "reject"


@pytest.mark.parametrize("optional_tools", OPTIONAL_TOOLS)
def test_non_declaring_client_calling_required_tool_waits_when_required_without_extension_is_wait(optional_tools):
    assert _decide(False, "required", optional_tools, "wait") == "wait"


@pytest.mark.parametrize(("optional_tools", "required_without_extension"), CONFIGS)
def test_non_declaring_client_calling_optional_tool_gets_plain_call(optional_tools, required_without_extension):
    assert _decide(False, "optional", optional_tools, required_without_extension) == "sync"


@pytest.mark.parametrize(("optional_tools", "required_without_extension"), CONFIGS)
def test_non_declaring_client_calling_forbidden_tool_gets_plain_call(optional_tools, required_without_extension):
    assert _decide(False, "forbidden", optional_tools, required_without_extension) == "sync"


# --- absent taskSupport = forbidden ------------------------------------------------------------


@pytest.mark.parametrize(
    "tool",
    [
        {"name": "greet", "inputSchema": {"type": "object"}, "execution": None},  # mcp 1.30 / FastMCP 3 trace
        {"name": "greet", "inputSchema": {"type": "object"}},
        {"name": "greet", "inputSchema": {"type": "object"}, "execution": {}},
    ],
    ids=["execution-null", "no-execution", "execution-without-taskSupport"],
)
@pytest.mark.parametrize("declared", [True, False])
def test_tool_with_absent_task_support_gets_plain_call(tool, declared):
    assert task_support(tool) == "forbidden"
    for optional_tools, required_without_extension in CONFIGS:
        assert _decide(declared, task_support(tool), optional_tools, required_without_extension) == "sync"


# --- backend without tasks.requests.tools.call -------------------------------------------------


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("support", ["required", "optional", "forbidden"])
@pytest.mark.parametrize(("optional_tools", "required_without_extension"), CONFIGS)
def test_backend_without_tasks_capability_is_always_called_plainly(declared, support, optional_tools, required_without_extension):
    assert _decide(declared, support, optional_tools, required_without_extension, offers=False) == "sync"


# --- defaults ----------------------------------------------------------------------------------


def test_config_defaults_are_optional_tools_task_and_required_without_extension_reject():
    assert creation_decision(declared=True, support="optional", backend_offers_tasks=True) == "task"
    assert creation_decision(declared=False, support="required", backend_offers_tasks=True) == "reject"
