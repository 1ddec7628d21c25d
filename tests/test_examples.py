"""The worked examples in ``examples/``, each run with its one command as a user would.

Each starts its own mock LLM, embedded Redis and worker processes, and stops them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_pr_review_reports_each_files_findings_most_severe_first_with_the_cost(tmp_path: Path) -> None:
    report_path = tmp_path / "review.md"
    run_example("pr_review.py", "--output", str(report_path))
    report = report_path.read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "`" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["critical", "high", "high", "medium", "low"]
    assert "`app/auth.py` | 1 | hardcoded-secret" in rows[0]
    # The finding reads as written: no word of it taken for a secret.
    assert "'ADMIN_PASSWORD': read it from the environment" in rows[0] and "REDACTED" not in report
    # The test's fake credential is low, and the binary file is reviewed (no findings), not failed.
    assert "`tests/test_auth.py` | 1 | hardcoded-secret" in rows[4]
    assert "6 files reviewed in parallel, 5 findings" in report
    assert "6/6 files" in report and "could not be reviewed" not in report and "cost $0.0" in report


def test_claude_per_branch_leaves_one_committed_branch_per_task(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# repo\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")
    result = run_example(
        "claude_branches.py",
        "--repo",
        str(repo),
        "--task",
        "docs=Explain the setup",
        "--task",
        "tests=Add tests",
    )
    assert "2/2 branches" in result.stdout
    for branch, prompt in [("docs", "Explain the setup"), ("tests", "Add tests")]:
        notes = _git(repo, "show", f"{branch}:NOTES.md")
        assert notes.startswith(f"## {prompt}\n"), "the stand-in claude ran in that branch's worktree"
        assert _git(repo, "log", "-1", "--format=%s", branch).strip() == f"claude: {prompt}"
    assert _git(repo, "worktree", "list").count("\n") == 1, "every worktree was removed"
    assert not (repo / "NOTES.md").exists(), "the main checkout is untouched"


def test_claude_per_branch_in_sandboxes_reaches_the_llm_through_the_egress_proxy() -> None:
    # Under /tmp itself: the sandboxes' users read the repository's objects.
    repo = Path(tempfile.mkdtemp(prefix="af-claude-repo-"))
    try:
        repo.chmod(0o755)
        _git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# repo\n")
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")
        args = ["--sandbox", "--repo", str(repo), "--task", "docs=Explain it"]
        result = run_example("claude_branches.py", *args)
        assert "1/1 branches" in result.stdout
        assert _git(repo, "show", "docs:NOTES.md").startswith("## Explain it\n"), "claude ran in the clone"
        assert _git(repo, "log", "-1", "--format=%s", "docs").strip() == "claude: Explain it"
    finally:
        shutil.rmtree(repo)


def test_vendor_pages_hold_each_domains_limit_and_dead_letter_the_broken_pages() -> None:
    report = json.loads(run_example("vendor_pages.py", "--pages", "6", "--json").stdout)
    sites = report["sites"]
    assert sites["127.0.0.2"]["max_in_flight"] <= 2 and sites["127.0.0.3"]["max_in_flight"] <= 1
    assert sites["127.0.0.1"]["max_in_flight"] <= 4
    failed = sorted(f["url"].rsplit("/", 1)[-1] for f in report["failed"])
    assert failed == ["3", "6"] and all("127.0.0.3" in f["url"] for f in report["failed"])
    assert report["summary"]["dead_lettered"] == 2 and report["summary"]["succeeded"] == 16
    tones = {o["product"]: o["tone"] for o in report["offers"]}
    assert tones["vendor-a plan 1"] == "NEGATIVE" and tones["vendor-a plan 3"] == "POSITIVE"


def test_nightly_schedule_fans_out_and_posts_one_digest() -> None:
    result = run_example("nightly_digest.py")
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "*Nightly competitor digest*: 5 competitors checked"
    assert [line.split("]")[0] for line in lines[1:]] == ["• [negative"] * 2 + ["• [positive"] * 2 + [
        "• [neutral"
    ]
    assert "5/5 checked" in result.stderr
