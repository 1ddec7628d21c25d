"""Rule-based code-review findings from a unified diff (the mock model's reviewer).

Only added lines (``+`` lines of a hunk) are reviewed, and each is reported at its line number
in the new file. Rules, by name:

============================  ========  =============================================
rule                          severity  flags
============================  ========  =============================================
``eval-exec``                 high      a call to ``eval(`` or ``exec(``
``hardcoded-secret``          critical  a password, secret, token or API key assigned a
                                        string literal, or a well-known key format
``bare-except``               medium    ``except:`` with no exception class
``shell-true``                high      ``shell=True`` in a subprocess call
``sql-string-format``         high      SQL built with an f-string, ``%``, ``.format(``
                                        or ``+``
``pickle-loads``              high      ``pickle.load(`` or ``pickle.loads(``
``tls-verify-disabled``       high      ``verify=False``
============================  ========  =============================================

Severities are calibrated by where the line is: in a test (under ``tests/``, ``test/`` or
``fixtures/``, or a ``test_*``, ``*_test.*`` or ``conftest.py`` file) or in documentation
(under ``docs/``, or a ``.md``, ``.rst`` or ``.txt`` file), a finding is at most ``low``: test
fixtures hold fake credentials on purpose, and neither ships to production.

A file's diff with no hunk (a binary file, a rename, a mode change) has no findings. A
finding's message never repeats a secret's value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["RULES", "Finding", "Rule", "calibrated", "find_issues", "is_unified_diff"]

Severity = Literal["low", "medium", "high", "critical"]

_NOT_SHIPPED = re.compile(
    r"""(?x)
      (?:^|/)(?:tests?|testing|fixtures?|__tests__|docs?)/
    | (?:^|/)(?:test_[^/]*|[^/]*_test\.\w+|conftest\.py)$
    | \.(?:md|rst|txt)$
    """
)


def calibrated(severity: Severity, file: str) -> Severity:
    """``severity`` for a finding in ``file``: at most ``low`` in tests and documentation."""
    return "low" if _NOT_SHIPPED.search(file) else severity


@dataclass(frozen=True)
class Finding:
    """One problem on one added line; ``line`` is 1-based in the new version of ``file``."""

    file: str
    line: int
    severity: Severity
    rule: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The finding as a JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Rule:
    """A check of one added line: ``match`` returns the finding's message, or None."""

    name: str
    severity: Severity
    match: Callable[[str], str | None]


def _search(pattern: str, message: str, flags: int = 0) -> Callable[[str], str | None]:
    compiled = re.compile(pattern, flags)

    def match(line: str) -> str | None:
        return message if compiled.search(line) else None

    return match


_SECRET_NAME = re.compile(
    r"""(?ix)
    \b(?P<name>[\w.]*(?:password|passwd|pwd|secret|api_?key|access_?key|private_?key|
       auth_?token|token|credentials?)[\w]*)["']?
    \s*(?::|=|:=|=>)\s*
    (?:[rbuf]{0,2})["'](?P<value>[^"'\s]{4,})["']
    """
)
_KEY_FORMATS = re.compile(
    r"\b(?:AKIA[0-9A-Z]{16}|sk-(?:ant-)?[A-Za-z0-9_\-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|"
    r"xox[abprs]-[A-Za-z0-9\-]{10,})\b"
)
_PLACEHOLDERS = frozenset({"xxxx", "changeme", "placeholder", "redacted", "example", "none"})


def _hardcoded_secret(line: str) -> str | None:
    if _KEY_FORMATS.search(line):
        return "a credential in a well-known key format is committed in the source"
    found = _SECRET_NAME.search(line)
    if found and found.group("value").lower() not in _PLACEHOLDERS:
        return (
            f"hard-coded secret assigned to {found.group('name')!r}: "
            "read it from the environment or a secret store instead"
        )
    return None


_SQL_VERB = re.compile(r"(?i)\b(select\s.+\sfrom|insert\s+into|update\s+\w+\s+set|delete\s+from)\b")
_SQL_BUILT = re.compile(
    r"""(?x)
      \b[fF][rR]?["'].*\{.+\}            # an f-string with a placeholder
    | ["']\s*%\s*[\w(\[{]               # "..." % value
    | ["']\s*\.format\(                  # "...".format(...)
    | ["']\s*\+\s*\w | \w\s*\+\s*["']    # "..." + value, value + "..."
    """
)


def _sql_string_format(line: str) -> str | None:
    if _SQL_VERB.search(line) and _SQL_BUILT.search(line):
        return "SQL built by string formatting: pass the values as query parameters"
    return None


RULES: tuple[Rule, ...] = (
    Rule(
        "eval-exec",
        "high",
        _search(r"(?<![\w.])(?:eval|exec)\s*\(", "eval/exec runs arbitrary code from its input"),
    ),
    Rule("hardcoded-secret", "critical", _hardcoded_secret),
    Rule(
        "bare-except",
        "medium",
        _search(r"^\s*except\s*:", "bare except: also swallows KeyboardInterrupt and SystemExit"),
    ),
    Rule(
        "shell-true",
        "high",
        _search(r"\bshell\s*=\s*True\b", "shell=True lets input inject shell commands"),
    ),
    Rule("sql-string-format", "high", _sql_string_format),
    Rule(
        "pickle-loads",
        "high",
        _search(
            r"\b(?:c?[Pp]ickle|dill)\.loads?\s*\(",
            "unpickling input can run arbitrary code: use JSON or a safe format",
        ),
    ),
    Rule(
        "tls-verify-disabled",
        "high",
        _search(r"\bverify\s*=\s*False\b", "verify=False turns off TLS certificate checks"),
    ),
)

_HUNK = re.compile(r"^@@ -\d+(?:,(?P<old>\d+))? \+(?P<start>\d+)(?:,(?P<new>\d+))? @@")


_HEADERS = ("+++ ", "--- ", "diff ", "index ")
_GIT_HEADER = re.compile(r"^diff --git \S")


def is_unified_diff(text: str) -> bool:
    """True when ``text`` holds a unified-diff hunk header or a ``diff --git`` file header
    (a binary file, a rename or a mode change has no hunk)."""
    return any(_HUNK.match(line) or _GIT_HEADER.match(line) for line in text.splitlines())


def _added_lines(diff: str) -> Iterator[tuple[str, int, str]]:
    """``(file, new line number, text)`` for every added line of ``diff``.

    A hunk's header says how many old and new lines it holds; counting them is what tells an
    added line that starts with ``++`` from the next file's ``+++`` header. Hand-written diffs
    often miscount, so once the counts run out, lines that are not headers still belong to the
    hunk.
    """
    file = "<unknown>"
    line_no = old_left = new_left = 0
    in_hunk = False
    for raw in diff.splitlines():
        counted = old_left > 0 or new_left > 0
        if raw.startswith(("@", "diff ")) or (not counted and raw.startswith(_HEADERS)):
            # No hunk line starts with "@" or "diff", whatever the counts say.
            in_hunk = counted = False
            old_left = new_left = 0
        if counted or in_hunk:
            if raw.startswith("+"):
                yield file, line_no, raw[1:]
                line_no += 1
                new_left -= 1
            elif raw.startswith("-"):
                old_left -= 1
            elif raw.startswith(" ") or raw == "":
                line_no += 1
                old_left -= 1
                new_left -= 1
            # A "\ No newline at end of file" marker belongs to neither side.
            continue
        if raw.startswith("+++ "):
            path = raw[4:].split("\t", 1)[0].strip()
            file = path[2:] if path.startswith(("b/", "a/")) else path
            continue
        hunk = _HUNK.match(raw)
        if hunk:
            line_no = int(hunk.group("start"))
            old_left = int(hunk.group("old") or 1)
            new_left = int(hunk.group("new") or 1)
            in_hunk = True


def _is_comment(text: str) -> bool:
    return text.lstrip().startswith(("#", "//", "--"))


def find_issues(diff: str) -> list[Finding]:
    """Findings for the added lines of ``diff``, in diff order, one per rule and line."""
    findings: list[Finding] = []
    for file, line_no, text in _added_lines(diff):
        if _is_comment(text):
            continue
        for rule in RULES:
            message = rule.match(text)
            if message is not None:
                findings.append(Finding(file, line_no, calibrated(rule.severity, file), rule.name, message))
    return findings
