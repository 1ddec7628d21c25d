"""The text ``make test-upstream`` prints: counts per suite and transport, the tests that fare
worse with agentfleet's transport (with the lines that say why), and the verdict."""

from __future__ import annotations

import textwrap
from pathlib import Path

from upstream import compare
from upstream.suites import RunOutcome

_COLUMNS = ("passed", "failed", "error", "skipped", "xfailed", "reruns")


def _table(
    outcomes: list[RunOutcome], results: dict[tuple[str, str], dict[str, compare.Result]]
) -> list[str]:
    lines = [f"{'suite':8}{'transport':12}" + "".join(f"{c:>9}" for c in _COLUMNS) + f"{'time':>9}"]
    for outcome in outcomes:
        found = results.get((outcome.suite, outcome.transport))
        head = f"{outcome.suite:8}{outcome.transport:12}"
        if found is None:
            lines.append(
                head + f"  did not complete (pytest exit code {outcome.exit_code}; see {outcome.log})"
            )
            continue
        tally = compare.counts(found)
        took = f"{outcome.wall_s:>8.0f}s" if outcome.wall_s else "  earlier"
        lines.append(head + "".join(f"{tally[c]:>9}" for c in _COLUMNS) + took)
    return lines


def _difference_lines(
    difference: compare.Difference, known: dict[tuple[str, str], compare.KnownDifference]
) -> list[str]:
    after = difference.agentfleet
    said = f"{after.outcome} after {after.attempts} attempt(s)" if after else "not run"
    lines = [f"  {difference.nodeid}", f"    stock: {difference.stock.outcome}; agentfleet: {said}"]
    if after and after.message:
        lines += textwrap.indent(after.message, "      | ").splitlines()
    entry = known.get(difference.key)
    if entry:
        lines.append(f"    known difference: {entry.reason} (covered by {entry.covered_by})")
    return lines


def render(
    outcomes: list[RunOutcome], known: list[compare.KnownDifference], versions: dict[str, str], total_s: float
) -> tuple[str, int]:
    """The report and the exit status: 0 no unexplained difference, 1 some, 2 a run broke."""
    results = {(o.suite, o.transport): compare.read_junit(o.junit) for o in outcomes if o.completed}
    suites = list(dict.fromkeys(o.suite for o in outcomes))
    lines = [
        "Upstream suites at the installed versions: " + ", ".join(f"{d} {v}" for d, v in versions.items()),
        "",
    ]
    lines += _table(outcomes, results)
    by_key = {entry.key: entry for entry in known}
    found: list[compare.Difference] = []
    compared: set[str] = set()
    for suite in suites:
        stock, ours = results.get((suite, "stock")), results.get((suite, "agentfleet"))
        if stock is None or ours is None:
            continue
        compared.add(suite)
        differ = compare.differences(suite, stock, ours)
        found += differ
        lines += [
            "",
            f"{suite}: {len(differ)} test(s) fare worse with agentfleet's transport than with the stock one",
        ]
        for difference in differ:
            lines += _difference_lines(difference, by_key)
        both = sorted(
            n
            for n, r in ours.items()
            if r.outcome in ("failed", "error") and n in stock and stock[n].outcome in ("failed", "error")
        )
        if both:
            lines += [f"{suite}: fail with both transports (not a difference):", *(f"  {n}" for n in both)]
        better = compare.improvements(stock, ours)
        if better:
            lines += [f"{suite}: fare better with agentfleet's transport:", *(f"  {n}" for n in better)]
    for entry in compare.stale(found, known, compared):
        lines.append(f"note: known difference {entry.suite} {entry.test} no longer differs: remove it")
    missing = compare.unexplained(found, known)
    broken = [o for o in outcomes if not o.completed]
    lines.append("")
    if broken:
        status = 2
        lines.append(
            "BROKEN: " + ", ".join(f"{o.suite} with {o.transport}" for o in broken) + " did not complete"
        )
    elif missing:
        status = 1
        lines.append(
            f"FAIL: {len(missing)} test(s) fare worse with agentfleet's transport and are not listed in "
            "tests/upstream/known_differences.toml (with the reason in docs/guarantees.md)"
        )
    else:
        status = 0
        lines.append(f"OK: no unexplained difference ({len(found)} known)")
    lines.append(f"total time {total_s:.0f} s")
    return "\n".join(lines), status


def write_summary(path: Path, text: str) -> None:
    """Keep the report beside the JUnit XML it was made from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
