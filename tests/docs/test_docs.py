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


_NUMBERS = r"§?\d+(?:[–-]§?\d+)?"
DECISION_REFERENCE = re.compile(rf"\b[Dd]ecisions?(?:\.md)?`?,?\s+({_NUMBERS}(?:(?:,\s*|\s+and\s+){_NUMBERS})*)")
"""A reference that names the decisions: "decisions.md §95, §96", "docs/decisions.md 23–28", "decision 169",
"decisions 72 and 130", "Decisions 23–28 and 83–85". Its numbers are all decisions."""
BARE_SECTION = re.compile(r"§(\d{2,})(?:[–-]§?(\d+))?(?![.\d])")
"""A bare "§139" or "§89–§93": a decision, since no other document here has ten sections (behaviour.md's and
wire.md's are §1 to §9, their subsections §4.10 and the like), unless a document or standard is named just
before it (`behaviour.md §4`, `RFC 9728 §3`, `JSON-RPC 2.0 §5`); a one-digit bare § is left alone, as it may
name a section of behaviour.md or wire.md."""
OTHER_DOCUMENT = re.compile(r"(?:\.md`*|\bRFC \d+|\b2\.0|\bHTML|\bSEP-\d+|§\d+(?:\.\d+)+,)\s*$")


def cited_decisions(text: str) -> list[int]:
    """Every decision number `text` cites, in order (a range of fewer than 20 with each number in it)."""
    spans: list[tuple[int, int, int]] = []  # (where, first, last)
    named = list(DECISION_REFERENCE.finditer(text))
    for match in named:
        for number in re.finditer(r"§?(\d+)(?:[–-]§?(\d+))?", match.group(1)):
            spans.append((match.start(1) + number.start(), int(number.group(1)), int(number.group(2) or number.group(1))))
    for match in BARE_SECTION.finditer(text):
        inside_named = any(reference.start() <= match.start() < reference.end() for reference in named)
        if not inside_named and not OTHER_DOCUMENT.search(text[max(0, match.start() - 30) : match.start()]):
            spans.append((match.start(), int(match.group(1)), int(match.group(2) or match.group(1))))
    return [n for _, first, last in sorted(spans) for n in (range(first, last + 1) if 0 <= last - first < 20 else (first, last))]


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
    sources = [*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("proxy/**/*.py"), *ROOT.glob("translators/**/*.py")]
    for path in [*sources, *ROOT.glob("tests/**/*.py")]:
        for number in cited_decisions(path.read_text()):
            cited.setdefault(number, []).append(str(path.relative_to(ROOT)))
    assert len(cited) > 120  # the forms above are the ones the documents and the code use
    unknown = {number: sorted(set(files)) for number, files in cited.items() if number not in set(headings)}
    assert unknown == {}


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ("(docs/decisions.md §95, §96)", [95, 96]),
        ("docs/decisions.md 23–28; docs/configuration.md", [23, 24, 25, 26, 27, 28]),
        ("decisions.md §89–§93). Use it", [89, 90, 91, 92, 93]),
        ("Decisions 23–28 and 83–85 in", [23, 24, 25, 26, 27, 28, 83, 84, 85]),
        ("(decision 169): after", [169]),
        ("decisions 72 and 149), since", [72, 149]),
        ("decisions.md\n§71, §140); the new", [71, 140]),
        ("its store (§44), so", [44]),
        ("behaviour.md §9 and wire.md §2.2, §4.10 of behaviour, §6", []),
        ("RFC 9728 §31; JSON-RPC 2.0 §45; behaviour.md §12", []),
    ],
)
def test_decision_references_are_read_in_every_form_the_documents_use(text: str, cited: list[int]) -> None:
    assert cited_decisions(text) == cited


async def test_the_metrics_reference_lists_every_metric_family_the_proxy_exports(tmp_path: Path) -> None:
    """Issue 46: the reference table listed 7 of 11 families. Every family `/metrics` has (a proxy
    with one backend, not reachable: the families are there before any sample) is a row of the table
    in docs/operations.md "Metrics"."""
    async with running_proxy("http://127.0.0.1:9/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/metrics") as response:
            exported = {line.split()[2] for line in (await response.text()).splitlines() if line.startswith("# TYPE ")}
    documented = set(
        re.findall(r"^\| `(mcp_tasks_proxy_[a-z_]+)` \|", (ROOT / "docs" / "operations.md").read_text(), re.MULTILINE)
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


def test_every_relative_link_in_the_documents_names_a_file_and_a_heading_that_exist() -> None:
    """Issue 46: the operations sections moved from configuration.md to operations.md; a link to
    `configuration.md#status-page` left behind would open the top of the page."""

    def anchors(path: Path) -> set[str]:
        fenced, found = False, set(re.findall(r'<a id="([^"]+)"></a>', path.read_text()))
        for line in path.read_text().splitlines():
            fenced = fenced != line.startswith("```")
            match = None if fenced else re.match(r"^#{1,6} (.+)$", line)
            if match:
                found.add(_slug(match.group(1)))
        return found

    broken = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            name, _, anchor = target.partition("#")
            destination = path.parent / name if name else path
            if not destination.exists() or (anchor and destination.suffix == ".md" and anchor not in anchors(destination)):
                broken.append(f"{path.name}: {target}")
    assert broken == []
