"""Every command's help, rendered at 80 columns, reads as plain text: nothing cut, no markup,
every value named in words, one spelling per option across commands."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from agentfleet.cli.app import app


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def _section(text: str, title: str) -> list[str]:
    """The lines of a help section (``Commands:``, ``Options:``)."""
    _, found, rest = text.partition(f"\n{title}:\n")
    return rest.split("\n\n", 1)[0].splitlines() if found else []


def _paths(path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for line in _section(_help(path), "Commands"):
        if re.match(r"^  \S", line):
            yield from _paths((*path, line.split()[0]))


def _options(path: tuple[str, ...]) -> list[str]:
    """The option spellings a command's help lists."""
    return [
        word.rstrip(",")
        for line in _section(_help(path), "Options")
        if re.match(r"^  -", line)
        for word in line.split("  ")[1].split()
        if word.startswith("-")
    ]


PATHS = list(_paths())


def test_the_walk_finds_every_command() -> None:
    assert len(PATHS) > 25
    assert ("dlq", "show") in PATHS and ("runs", "show") in PATHS and ("run",) in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "agentfleet")
def test_help_fits_80_columns_in_plain_words(path: tuple[str, ...]) -> None:
    text = _help(path)
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert not too_long, too_long
    # "[ARGS]..." in a usage line says an argument repeats; any other "..." is text cut short.
    assert "…" not in text and "..." not in text.replace("]...", "]"), text
    assert "``" not in text, "literal reStructuredText backticks"
    assert "<bool>" not in text, "a flag shown as taking a value"
    typed = [line for line in _section(text, "Options") if "<" in line.split("  ")[1]]
    assert not typed, f"an option's value named by its Python type: {typed}"
    assert "[/" not in text and "[bold" not in text and "[red" not in text, "rich markup"


def test_one_spelling_per_option_across_commands() -> None:
    spellings: dict[str, set[str]] = {}
    for path in PATHS:
        for opt in _options(path):
            for word in opt.split("/"):
                spellings.setdefault(word.lstrip("-").replace("-", ""), set()).add(word)
    mixed = {key: names for key, names in spellings.items() if len(names) > 1}
    assert not mixed, mixed
    everywhere = {opt for path in PATHS for opt in _options(path)}
    assert "--address" not in everywhere and "--loglevel" not in everywhere
    assert "--host" in _options(("flower",)) and "--log-level" in _options(("worker",))


@pytest.mark.parametrize(
    ("args", "spelling"),
    [
        (["flower", "--address", "0.0.0.0", "--help"], "--address"),
        (["worker", "--loglevel", "DEBUG", "--help"], "--loglevel"),
        (["beat", "--loglevel", "DEBUG", "--help"], "--loglevel"),
    ],
)
def test_old_spellings_still_work_unlisted(args: list[str], spelling: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert spelling not in result.output
