"""The CLI's consoles read the width when they print, so which test (or shell) imported
``agentfleet.cli.output`` first, and with which ``COLUMNS``, does not decide a table's width."""

from __future__ import annotations

import os

import pytest
from rich.console import Console
from rich.table import Table

from agentfleet.cli.output import console, err_console


def _not_a_terminal(descriptor: int) -> os.terminal_size:
    raise OSError(25, "Inappropriate ioctl for device")


def _table_line_width(printer: Console = console) -> int:
    table = Table("name", "value", expand=True)
    table.add_row("a", "b")
    with printer.capture() as captured:
        printer.print(table)
    lines = captured.get().splitlines()
    assert lines, captured.get()
    return max(len(line) for line in lines)


@pytest.mark.parametrize("columns", ["40", "160", "250"])
def test_the_width_is_the_one_columns_names_when_printing(
    monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert console.width == int(columns) and err_console.width == int(columns)
    assert _table_line_width() == int(columns)


def test_without_columns_and_without_a_terminal_the_width_is_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", _not_a_terminal)
    assert (console.width, console.height) == (80, 25)


def test_a_width_set_on_the_console_wins_over_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    fixed = type(console)()
    fixed.width = 60
    assert fixed.width == 60 and _table_line_width(fixed) == 60


def test_columns_set_when_the_console_is_made_does_not_stick(monkeypatch: pytest.MonkeyPatch) -> None:
    """As at import: the console is made with COLUMNS=30, then prints with 120, then none."""
    monkeypatch.setenv("COLUMNS", "30")
    made = type(console)()
    monkeypatch.setenv("COLUMNS", "120")
    assert made.width == 120 and _table_line_width(made) == 120
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(os, "get_terminal_size", _not_a_terminal)
    assert made.width == 80
