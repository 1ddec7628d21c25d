"""Parallel pull-request review: one review agent per changed file, findings merged into a report.

    python examples/pr_review.py                         # a demo repository made on the spot
    python examples/pr_review.py --repo . --base main --head HEAD --output review.md

It takes ``git diff BASE..HEAD`` of a real repository, splits it by file, and fans the files
out to the built-in ``agentfleet.review_diff`` task, one agent per file, under the model's
limits (requests and tokens a minute for ``anthropic:claude-haiku-4-5``, and a concurrency
cap). The fan-in merges the findings: duplicates (same file, line and rule) are dropped and
the rest sorted by severity. The Markdown report ends with the run's cost.

Offline it reviews against the mock Messages API, which flags ``eval(``, hard-coded
passwords, bare ``except:`` and the like; with ``ANTHROPIC_API_KEY`` set it asks Claude.
Severities are calibrated: what ships and can be exploited is critical, the same line in a
test or in the docs is low (fixtures hold fake credentials on purpose).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentfleet import merge

__all__ = ["build_report", "demo_repository", "merge_review", "split_diff"]

MODEL_LIMITS = {
    "anthropic:claude-haiku-4-5": {
        "requests_per_min": 600,
        "input_tokens_per_min": 400_000,
        "output_tokens_per_min": 80_000,
        "max_concurrency": 8,
    }
}
SEVERITY = ("critical", "high", "medium", "low", "info")
_FILE_HEADER = re.compile(r"^diff --git a/(?P<path>\S+) b/", re.MULTILINE)


def merge_review(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fan-in: every file's findings, one per (file, line, rule), most severe first."""
    return merge.merge_structured(results, fingerprint_fields=("file", "line", "rule"), order=SEVERITY)


def split_diff(diff: str) -> dict[str, str]:
    """A unified diff cut into one diff per file, keyed by the file's path."""
    starts = list(_FILE_HEADER.finditer(diff))
    return {
        match.group("path"): diff[match.start() : starts[i + 1].start() if i + 1 < len(starts) else len(diff)]
        for i, match in enumerate(starts)
    }


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def demo_repository(root: Path) -> Path:
    """A small repository whose last commit changes six files: three for the worse, a test with
    a fake credential, a binary file and the README."""
    repo = root / "shop"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    files = {
        "app/auth.py": "def login(user, password):\n    return check(user, password)\n",
        "app/billing.py": "def total(items):\n    return sum(i.price for i in items)\n",
        "app/report.py": "def render(rows):\n    return '\\n'.join(rows)\n",
        "README.md": "# shop\n",
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=demo", "-c", "user.email=demo@example.invalid", "commit", "-qm", "base")
    (repo / "app/auth.py").write_text(
        'ADMIN_PASSWORD = "hunter2"\n\n\ndef login(user, password):\n'
        "    try:\n        return check(user, password)\n    except:\n        return False\n"
    )
    (repo / "app/billing.py").write_text(
        "def total(items, discount_expr):\n    discount = eval(discount_expr)\n"
        "    return sum(i.price for i in items) - discount\n"
    )
    (repo / "app/report.py").write_text(
        "import subprocess\n\n\ndef render(rows, printer):\n"
        "    subprocess.call('lp ' + printer, shell=True)\n    return '\\n'.join(rows)\n"
    )
    (repo / "README.md").write_text("# shop\n\nNow with discounts.\n")
    # A test's fake credential (a low finding, not a critical one) and a binary file (no hunk).
    (repo / "tests").mkdir()
    (repo / "tests/test_auth.py").write_text(
        'TEST_PASSWORD = "not-a-real-one"\n\n\ndef test_login():\n    assert login("u", TEST_PASSWORD)\n'
    )
    (repo / "app/logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=demo", "-c", "user.email=demo@example.invalid", "commit", "-qm", "discounts")
    return repo


def build_report(title: str, files: list[str], merged: dict[str, Any], summary: Any) -> str:
    """The review as Markdown: findings by severity, what could not be reviewed, and the cost."""
    findings = merged.get("findings", [])
    lines = [f"# Review of {title}", ""]
    lines.append(
        f"{len(files)} files reviewed in parallel, {len(findings)} findings "
        f"({merged.get('duplicates_removed', 0)} duplicates dropped)."
    )
    lines += ["", "| severity | file | line | rule | finding |", "| --- | --- | --- | --- | --- |"]
    for f in findings:
        message = str(f.get("message", "")).replace("|", "\\|")
        lines.append(
            f"| {f.get('severity')} | `{f.get('file')}` | {f.get('line')} | {f.get('rule')} | {message} |"
        )
    if summary.failed:
        lines += [
            "",
            f"{summary.failed} files could not be reviewed: "
            f"see `agentfleet dlq list --run {summary.run_id}`.",
        ]
    lines += [
        "",
        f"Run `{summary.run_id}`: {summary.succeeded}/{summary.tasks_total} files, "
        f"{summary.wall_clock_s:.1f} s wall clock, cost ${summary.cost_usd:.4f}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, help="A git repository (default: a demo one)")
    parser.add_argument("--base", default="HEAD~1", help="The base revision (default HEAD~1)")
    parser.add_argument("--head", default="HEAD", help="The head revision (default HEAD)")
    parser.add_argument("--output", type=Path, help="Write the Markdown report here (default: stdout)")
    args = parser.parse_args(argv)

    from offline import offline_fleet

    with tempfile.TemporaryDirectory() as scratch:
        repo = args.repo or demo_repository(Path(scratch))
        diffs = split_diff(_git(repo, "diff", f"{args.base}..{args.head}"))
        if not diffs:
            print(f"no changes between {args.base} and {args.head}", file=sys.stderr)
            return 1
        env = {"AGENTFLEET_LIMITS": json.dumps(MODEL_LIMITS)}
        with offline_fleet("pr_review", env=env) as cluster:
            inputs = [{"diff": diffs[path]} for path in sorted(diffs)]
            run = cluster.fleet().map(
                "agentfleet.review_diff",
                inputs,
                name=f"review {args.base}..{args.head}",
                aggregate="pr_review:merge_review",
            )
            summary = run.wait(timeout_s=300)
            merged = run.result(timeout_s=60)
    report = build_report(f"{args.base}..{args.head}", sorted(diffs), merged, summary)
    if args.output:
        args.output.write_text(report)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
