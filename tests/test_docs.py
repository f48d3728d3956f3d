"""The documents stay in step with the code."""

from __future__ import annotations

from pathlib import Path

from translators.table import render

ROOT = Path(__file__).resolve().parents[1]


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
