"""The documents stay in step with the code."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import aiohttp
import pytest
from support import REFERENCE_V1_TOOLS, running_proxy

from translators.table import render

ROOT = Path(__file__).resolve().parents[2]


def test_translation_table_in_docs_is_generated_from_the_code():
    doc = (ROOT / "docs" / "translation.md").read_text()
    generated = doc.split("<!-- BEGIN GENERATED: python -m translators.table -->\n", 1)[1].split("<!-- END GENERATED -->", 1)[0]
    assert generated == render()


def test_readme_quick_start_is_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("# mcp-tasks-proxy")
    section = readme.split("## Quick start", 1)[1]
    block = section.split("```", 2)[1]
    lines = [line for line in block.splitlines()[1:] if line.strip()]
    assert len(lines) == 2
    assert "mcp-tasks-proxy demo" in lines[0]
    assert "pytest" in lines[1] or "ci" in lines[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    test_command = readme.split("## Quick start", 1)[1].split("```", 2)[1].splitlines()[2]
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_every_document_names_the_stores_the_proxy_ships():
    """Issue 20 item 18: docs/load-balancing.md said the proxy shipped only an in-memory store,
    while the configuration ships SQLite (the default), memory and Redis."""
    from proxy.config import Settings

    assert Settings.model_fields["store"].default == "sqlite"
    shipped = ('"sqlite"', '"memory"', '"redis://host:port/db"')
    configuration = (ROOT / "docs" / "configuration.md").read_text()
    row = next(line for line in configuration.splitlines() if line.startswith("| `store` |"))
    assert [word in row for word in shipped] == [True, True, True]
    for name in ("README.md", "docs/load-balancing.md"):
        text = " ".join((ROOT / name).read_text().split())
        assert [word in text for word in shipped] == [True, True, True], name
        assert "ships the in-memory store" not in text and "ships only" not in text, name
    load_balancing = " ".join((ROOT / "docs" / "load-balancing.md").read_text().split())
    assert "The proxy ships three stores, chosen by the `store` setting" in load_balancing


def _readme_curl_blocks() -> list[str]:
    """The README's ``sh`` blocks that call the proxy with curl, in order."""
    readme = (ROOT / "README.md").read_text()
    blocks = [part.split("\n", 1)[1] for part in readme.split("```")[1::2] if part.startswith("sh\n")]
    return [block for block in blocks if "curl -s http://127.0.0.1:8080/mcp" in block]


@pytest.mark.peers
async def test_readme_curl_commands_create_a_task_and_poll_it_to_its_result(reference_v1_server, tmp_path):
    # Each command as the README prints it, against a proxy in front of the reference v1 server;
    # only the address is the test proxy's and TASK is set from the first answer.
    create, poll, _v1 = _readme_curl_blocks()
    assert poll.startswith("TASK='<the taskId from the answer>'\n")
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy:

        async def sh(command: str, **env: str) -> dict:
            process = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                command.replace("http://127.0.0.1:8080/mcp", proxy.url),
                env={**os.environ, **env},
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await process.communicate()
            assert process.returncode == 0
            return json.loads(out)

        created = (await sh(create))["result"]
        assert (created["resultType"], created["status"]) == ("task", "working")
        # The README's way to carry the id: the create command piped into its python3 one-liner.
        (extract,) = re.findall(r"`(\| python3 -c '[^`]+')`", (ROOT / "README.md").read_text())
        carried = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            f'TASK=$({create.strip().replace("http://127.0.0.1:8080/mcp", proxy.url)} {extract}) && printf %s "$TASK"',
            stdout=asyncio.subprocess.PIPE,
        )
        task_id = (await carried.communicate())[0].decode()
        assert carried.returncode == 0 and task_id.isascii() and len(task_id) > 100, task_id
        command = poll.split("\n", 1)[1]
        for _ in range(100):
            answer = await sh(command, TASK=task_id)
            if answer["result"]["status"] == "completed":
                break
            await asyncio.sleep(0.2)
        async with aiohttp.ClientSession() as http, http.get(proxy.base_url + "/status.json") as response:
            status = await response.json()
    assert status["leaning"] == []  # the README's commands send every header a v2 server requires
    assert answer["id"] == 2
    assert answer["result"]["result"] == {
        "content": [{"type": "text", "text": "computed hello"}],
        "isError": False,
        "resultType": "complete",
    }


@pytest.mark.peers
async def test_readme_v1_curl_commands_open_a_session_and_list_the_tools(reference_v1_server, tmp_path):
    """The README's v1 block, as printed: its first command prints the session id, the rest (with
    SESSION set from it, as the reader pastes it) initializes the session and lists the tools."""
    *_, v1 = _readme_curl_blocks()
    opening, rest = v1.split("SESSION='<the Mcp-Session-Id from the answer>'\n")
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy:

        async def sh(command: str, **env: str) -> str:
            process = await asyncio.create_subprocess_exec(
                "bash", "-c", command.replace("http://127.0.0.1:8080/mcp", proxy.url), env={**os.environ, **env},
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await process.communicate()
            assert process.returncode == 0
            return out.decode()

        name, session_id = (await sh(opening)).strip().split(": ")
        assert (name.lower(), len(session_id) > 20) == ("mcp-session-id", True)
        listed = json.loads(await sh(rest, SESSION=session_id))
    assert (listed["id"], [tool["name"] for tool in listed["result"]["tools"]]) == (2, REFERENCE_V1_TOOLS)


DECISION_REFERENCE = re.compile(r"decisions(?:\.md)?,? §?(\d+)(?:[–-]§?(\d+))?")


def test_every_decision_is_a_heading_with_a_stable_anchor_listed_in_the_index_and_every_reference_resolves() -> None:
    """Issue 46: decisions.md was one ordered list that renderers numbered 1..N, so "§139" opened
    another decision. Each decision is now a heading `### N. title` under the anchor `dN`."""
    text = (ROOT / "docs" / "decisions.md").read_text()
    index, body = text.split("\n## The decisions\n", 1)
    headings = [int(n) for n in re.findall(r'^<a id="d(\d+)"></a>\n### \1\. \S', body, re.MULTILINE)]
    assert headings == [int(n) for n in re.findall(r"^### (\d+)\. ", body, re.MULTILINE)]  # every heading has its anchor
    assert headings == sorted(set(headings)) and len(headings) > 150
    assert not re.search(r"^\d+\. \*\*", body, re.MULTILINE)  # no decision left as a list item
    listed = {int(n) for n in re.findall(r"^- \[(\d+)\]\(#d\1\)\. ", index, re.MULTILINE)}
    assert listed == set(headings)
    cited: dict[int, list[str]] = {}
    for path in [*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("proxy/**/*.py"), *ROOT.glob("translators/**/*.py")]:
        for match in DECISION_REFERENCE.finditer(path.read_text()):
            first, last = int(match.group(1)), int(match.group(2) or match.group(1))
            for number in range(first, last + 1) if last - first < 20 else (first, last):
                cited.setdefault(number, []).append(path.name)
    unknown = {number: files for number, files in cited.items() if number not in set(headings)}
    assert unknown == {}


async def test_the_metrics_reference_lists_every_metric_family_the_proxy_exports(tmp_path: Path) -> None:
    """Issue 46: the reference table listed 7 of 11 families. Every family `/metrics` has (a proxy
    with one backend, not reachable: the families are there before any sample) is a row of the table."""
    async with running_proxy("http://127.0.0.1:9/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/metrics") as response:
            exported = {line.split()[2] for line in (await response.text()).splitlines() if line.startswith("# TYPE ")}
    documented = set(
        re.findall(r"^\| `(mcp_tasks_proxy_[a-z_]+)` \|", (ROOT / "docs" / "configuration.md").read_text(), re.MULTILINE)
    )
    assert len(exported) >= 14 and exported - documented == set()


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_every_document_over_300_lines_opens_with_contents_linking_each_section() -> None:
    """Issue 46: no long document had a table of contents. decisions.md has its index by area
    (checked above) instead."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        if len(lines) <= 300 or path.name == "decisions.md":
            continue
        fenced, headings = False, []
        for line in lines:
            fenced = fenced != line.startswith("```")
            match = None if fenced else re.match(r"^(##|###) (.+)$", line)
            if match and match.group(2) != "Contents":
                headings.append((len(match.group(1)), match.group(2)))
        start = lines.index("## Contents")
        assert start < 40, (path.name, start)
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("#"))
        contents = [line for line in lines[start + 1 : end] if line.strip()]
        expected = [("  " if level == 3 else "") + f"- [{re.sub(r'[*]', '', text)}](#{_slug(text)})" for level, text in headings]
        assert contents == expected, path.name
