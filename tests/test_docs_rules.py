"""The README is the first hour and the docs site is the rest: every page in the site's
navigation, every link between them resolving, and every example either run by
tests/test_docs_examples.py or marked with why not and which test covers it instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from doc_examples import blocks_of

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted((REPO / "docs").glob("*.md"))
DOCUMENTS = [REPO / "README.md", *DOCS]


def _nav_pages(nav: list[object]) -> set[str]:
    found: set[str] = set()
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            if isinstance(value, list):
                found |= _nav_pages(value)
            elif isinstance(value, str):
                found.add(value)
    return found


def test_every_docs_page_is_in_the_sites_navigation() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert _nav_pages(config["nav"]) == {page.name for page in DOCS}


def test_the_readme_is_the_first_hour_and_links_to_pages_that_exist() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme)
    assert links, "the README sends readers to the manual"
    assert all((REPO / link).is_file() for link in links)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_an_example_that_is_not_run_says_what_covers_it(document: Path) -> None:
    for block in blocks_of(document.read_text()):
        if block.not_run is None:
            continue
        assert block.language in ("sh", "bash", "python"), f"line {block.line}: only code is marked"
        covered = re.findall(r"tests/test_\w+\.py", block.not_run)
        assert covered or "make bench" in block.not_run or "remote host" in block.not_run, (
            f"line {block.line}: {block.not_run!r} does not say what covers it"
        )
        assert all((REPO / path).is_file() for path in covered), block.not_run


def test_the_runner_reads_files_scripts_and_markers() -> None:
    blocks = blocks_of(
        "<!-- not run: needs Docker; tests/test_compose.py runs it -->\n"
        "```sh\ndocker compose up\n```\n\n"
        "```python\n# myapp/tasks.py\nX = 1\n```\n"
        "```python\nprint(1)\n```\n"
        "```text\nagentfleet dlq list [--json]\n```\n"
    )
    assert [(b.language, b.runs, b.file_path, b.not_run is not None) for b in blocks] == [
        ("sh", False, None, True),
        ("python", True, "myapp/tasks.py", False),
        ("python", True, None, False),
        ("text", False, None, False),
    ]
