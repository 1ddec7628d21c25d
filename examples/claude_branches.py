"""``claude --print`` per branch: one git worktree per task, run through the command runner.

    python examples/claude_branches.py                  # a demo repository, three tasks
    python examples/claude_branches.py --repo . --task "fix-typos=Fix the typos in README.md"
    python examples/claude_branches.py --sandbox        # each claude in a sandbox of its own

Each task gets a git worktree of its own on a new branch (inside the task's scratch
directory), runs ``claude --print PROMPT --output-format json`` there with the command
runner (only ``git`` and ``claude`` are allowed, no shell, a timeout that kills the whole
process group), commits what Claude changed on the branch and removes the worktree. The
branches stay in the repository for review.

With ``--sandbox`` (bubblewrap, see docs/sandbox.md) each task gets a sandbox whose workspace
is a clone of the repository (the ``[sandbox]`` template); ``git`` and ``claude`` run inside
it, where they see nothing of the worker and reach only the LLM's host, through the fleet's
egress proxy (an API key, configured as the ``anthropic`` credential, is filled in there and
never enters the sandbox); the worker then fetches the branch from the clone.

Offline, ``examples/bin/claude`` stands in for Claude Code: it asks the mock Messages API
and writes the answer to ``NOTES.md``. With Claude Code installed and ``ANTHROPIC_API_KEY``
set, the real ``claude`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentfleet import SandboxResult, TaskContext, fleet_task
from agentfleet.config import get_settings
from agentfleet.errors import PermanentError, RetryableError, TaskTimeLimit
from agentfleet.sandbox.backend import SandboxHandle
from agentfleet.tools.command import CommandResult, run_command

__all__ = ["claude_on_branch", "claude_on_branch_sandboxed"]

STAND_IN = Path(__file__).resolve().parent / "bin"
AUTHOR = ["-c", "user.name=agentfleet", "-c", "user.email=agentfleet@example.invalid"]


def _run(
    ctx: TaskContext, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> CommandResult:
    result = run_command(argv, settings=get_settings().command, workdir=cwd or ctx.workdir, env=env)
    if result.timed_out:
        raise TaskTimeLimit(f"{argv[0]} ran out of time after {result.duration_s:.0f} s")
    if result.exit_code != 0:
        message = f"{' '.join(argv[:3])} exited {result.exit_code}: {result.stderr.strip()[-500:]}"
        # git takes locks in the shared repository: another task holding one is worth a retry.
        raise (RetryableError if ".lock" in result.stderr else PermanentError)(message)
    return result


def _claude_env() -> dict[str, str]:
    env = {}
    base_url = get_settings().llm.base_url
    if base_url:
        env["ANTHROPIC_BASE_URL"] = base_url
    if os.environ.get("ANTHROPIC_API_KEY"):
        env["ANTHROPIC_API_KEY"] = os.environ["ANTHROPIC_API_KEY"]
    return env


@fleet_task(name="examples.claude_on_branch", max_retries=3, time_limit_s=900, soft_time_limit_s=840)
def claude_on_branch(
    ctx: TaskContext, repo: str, branch: str, prompt: str, base: str = "HEAD"
) -> dict[str, Any]:
    """Run ``claude --print prompt`` on a new branch ``branch`` of ``repo`` (from ``base``)."""
    tree = ctx.workdir / "tree"
    _run(ctx, ["git", "-C", repo, "worktree", "add", "-q", "-b", branch, str(tree), base])
    try:
        start = _run(ctx, ["git", "rev-parse", "HEAD"], cwd=tree).stdout.strip()
        answer = _run(
            ctx, ["claude", "--print", prompt, "--output-format", "json"], cwd=tree, env=_claude_env()
        )
        _run(ctx, ["git", "add", "-A"], cwd=tree)
        _run(ctx, ["git", *AUTHOR, "commit", "-q", "--allow-empty", "-m", f"claude: {prompt[:60]}"], cwd=tree)
        commit = _run(ctx, ["git", "rev-parse", "HEAD"], cwd=tree).stdout.strip()
        changed = _run(ctx, ["git", "diff", "--stat", f"{start}..{commit}"], cwd=tree).stdout.strip()
    finally:
        run_command(
            ["git", "-C", repo, "worktree", "remove", "--force", str(tree)],
            settings=get_settings().command,
            workdir=ctx.workdir,
        )
    reply = json.loads(answer.stdout)
    return {"branch": branch, "commit": commit, "changed": changed, "answer": reply.get("result", "")}


def _inside(sandbox: SandboxHandle, argv: list[str], env: dict[str, str] | None = None) -> SandboxResult:
    result = sandbox.run(argv, env=env)
    if result.timed_out:
        raise TaskTimeLimit(f"{argv[0]} ran out of time in the sandbox after {result.duration_s:.0f} s")
    if result.exit_code != 0:
        raise PermanentError(
            f"{' '.join(argv[:3])} exited {result.exit_code}: {result.stderr.strip()[-500:]}"
        )
    return result


def _sandbox_spec() -> dict[str, Any]:
    """The LLM's host as the one destination, and its key by name when one is configured."""
    llm = urlsplit(get_settings().llm.base_url or "https://api.anthropic.com")
    host = f"{llm.hostname}:{llm.port}" if llm.port else str(llm.hostname)
    named = ["anthropic"] if "anthropic" in get_settings().credentials else []
    return {"network": [host], "credentials": named, "limits": {"wall_s": 800}}


def _claude_inside(sandbox: SandboxHandle) -> tuple[str, dict[str, str]]:
    """The claude to run inside, and its environment: the key only as a placeholder."""
    env = {"ANTHROPIC_BASE_URL": get_settings().llm.base_url or "https://api.anthropic.com"}
    if "anthropic" in get_settings().credentials:
        env["ANTHROPIC_API_KEY"] = "$CRED{anthropic}"
    if shutil.which("claude", path="/usr/local/bin:/usr/bin:/bin"):
        return "claude", env
    # The stand-in, where git does not see it (the clone's own .git).
    stand_in = sandbox.workspace / ".git" / "stand-in"
    stand_in.mkdir(exist_ok=True)
    shutil.copy(STAND_IN / "claude", stand_in / "claude")
    return "/workspace/.git/stand-in/claude", env


def claude_on_branch_sandboxed(
    ctx: TaskContext, repo: str, branch: str, prompt: str, base: str = "HEAD"
) -> dict[str, Any]:
    """``claude_on_branch`` in the item's sandbox, on a clone of ``repo`` (see the module)."""
    sandbox = ctx.sandbox
    _inside(sandbox, ["git", "checkout", "-q", "-b", branch, base])
    start = _inside(sandbox, ["git", "rev-parse", "HEAD"]).stdout.strip()
    claude, env = _claude_inside(sandbox)
    answer = _inside(sandbox, [claude, "--print", prompt, "--output-format", "json"], env=env)
    _inside(sandbox, ["git", "add", "-A"])
    _inside(sandbox, ["git", *AUTHOR, "commit", "-q", "--allow-empty", "-m", f"claude: {prompt[:60]}"])
    commit = _inside(sandbox, ["git", "rev-parse", "HEAD"]).stdout.strip()
    changed = _inside(sandbox, ["git", "diff", "--stat", f"{start}..{commit}"]).stdout.strip()
    # The clone belongs to the sandbox's user: git trusts it only by a global setting, and the
    # command runner's HOME is the task's scratch directory.
    (ctx.workdir / ".gitconfig").write_text(f"[safe]\n\tdirectory = {sandbox.workspace}/.git\n")
    _run(ctx, ["git", "-C", repo, "fetch", "-q", str(sandbox.workspace), f"{branch}:{branch}"])
    reply = json.loads(answer.stdout)
    return {"branch": branch, "commit": commit, "changed": changed, "answer": reply.get("result", "")}


if os.environ.get("CLAUDE_BRANCHES_SANDBOX") == "1":
    fleet_task(
        name="examples.claude_on_branch_sandboxed",
        max_retries=3,
        time_limit_s=900,
        soft_time_limit_s=840,
        sandbox=_sandbox_spec(),
    )(claude_on_branch_sandboxed)


def _demo_repository(root: Path) -> Path:
    repo = root / "service"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("# service\n\nIt serves things.\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *AUTHOR, "commit", "-qm", "start"], check=True)
    return repo


DEMO_TASKS = [
    "add-tests=Write unit tests for the request parser",
    "docs=Explain the deployment in README.md",
    "cleanup=Remove the dead code in utils.py",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, help="A git repository (default: a demo one)")
    parser.add_argument("--task", action="append", default=[], metavar="BRANCH=PROMPT", help="Repeat it")
    parser.add_argument("--timeout-s", type=float, default=600, help="Seconds one claude run may take")
    parser.add_argument("--sandbox", action="store_true", help="Run git and claude in a sandbox per task")
    args = parser.parse_args(argv)

    from offline import offline_fleet

    with tempfile.TemporaryDirectory() as scratch:
        # A sandbox's user reads the repository's objects: it must reach the directory.
        os.chmod(scratch, 0o755)
        repo = (args.repo or _demo_repository(Path(scratch))).resolve()
        tasks = [t.split("=", 1) for t in (args.task or DEMO_TASKS)]
        env = {
            "AGENTFLEET_COMMAND__ENABLED": "true",
            "AGENTFLEET_COMMAND__ALLOW": json.dumps(["git", "claude"]),
            "AGENTFLEET_COMMAND__TIMEOUT_S": str(args.timeout_s),
        }
        if not shutil.which("claude"):
            env["PATH"] = os.pathsep.join([str(STAND_IN), os.environ.get("PATH", "")])
        task = "examples.claude_on_branch"
        if args.sandbox:
            task += "_sandboxed"
            env.update(CLAUDE_BRANCHES_SANDBOX="1", AGENTFLEET_SANDBOX__TEMPLATE=str(repo))
            if not os.environ.get("ANTHROPIC_API_KEY"):
                # The mock LLM listens on the host's loopback: open it to the egress proxy.
                env["AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS"] = json.dumps(["127.0.0.1"])
        with offline_fleet("claude_branches", env=env) as cluster:
            inputs = [{"repo": str(repo), "branch": branch, "prompt": prompt} for branch, prompt in tasks]
            run = cluster.fleet().map(task, inputs, name="claude per branch")
            for outcome in run.as_completed(timeout_s=args.timeout_s + 60):
                if outcome.ok:
                    result = outcome.result
                    stat = (result["changed"].splitlines() or ["no changes"])[-1]
                    print(f"{result['branch']}: {result['commit'][:10]}  {stat}")
                else:
                    print(f"{inputs[outcome.index]['branch']}: failed: {outcome.error_type}: {outcome.error}")
            summary = run.wait(timeout_s=60)
        print(
            f"{summary.succeeded}/{summary.tasks_total} branches in {repo}: {' '.join(b for b, _ in tasks)}"
        )
        return 0 if summary.succeeded == summary.tasks_total else 1


if __name__ == "__main__":
    sys.exit(main())
