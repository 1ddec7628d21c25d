"""Built-in agent tasks: sentiment labels, diff review, and a general tool-using agent.

Each goes through ``ctx.anthropic`` (limits, credentials, cost and budgets apply) and names its
model, so a pipeline can route a cheap stage to a small model and a hard one to a large one.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentfleet.errors import BadRequest
from agentfleet.tasks.agent import Tool, run_agent
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.decorator import fleet_task
from agentfleet.tasks.features.sandbox import item_sandbox
from agentfleet.tools.command import RUN_COMMAND_TOOL, run_command, run_sandboxed
from agentfleet.tools.fetch import HTTP_FETCH_TOOL, declared_methods, http_fetch
from agentfleet.tools.vault import CredentialVault

__all__ = [
    "BUILTIN_TOOLS",
    "SENTIMENT_MAX_TOKENS",
    "agent",
    "classify_sentiment",
    "review_diff",
    "review_prompt",
    "sentiment_prompt",
]

LABELS = ("POSITIVE", "NEGATIVE", "NEUTRAL", "MIXED")


def _fetch(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    from agentfleet.config import get_settings

    settings = get_settings()
    result = http_fetch(
        ctx.http,
        str(args["url"]),
        settings=settings.fetch,
        method=str(args.get("method", "GET")),
        headers=args.get("headers"),
        vault=CredentialVault(settings.credentials),
        methods=declared_methods(HTTP_FETCH_TOOL),
    )
    return result.model_dump()


def _command(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    from agentfleet.config import get_settings

    settings = get_settings().command
    sandbox = item_sandbox(ctx)
    if sandbox is not None:
        return run_sandboxed(list(args["argv"]), sandbox=sandbox, settings=settings).model_dump()
    return run_command(list(args["argv"]), settings=settings, workdir=ctx.workdir).model_dump()


def _tool(spec: dict[str, Any], fn: Any) -> Tool:
    return Tool(spec["name"], spec["description"], spec["input_schema"], fn)


BUILTIN_TOOLS: dict[str, Tool] = {
    "http_fetch": _tool(HTTP_FETCH_TOOL, _fetch),
    "run_command": _tool(RUN_COMMAND_TOOL, _command),
}


def sentiment_prompt(text: str) -> str:
    """The prompt ``classify_sentiment`` sends for ``text``."""
    return (
        "Classify the sentiment of the text. Answer with exactly one word: "
        f"{', '.join(LABELS)}.\n\nText: {text}"
    )


SENTIMENT_MAX_TOKENS = 8


@fleet_task(name="agentfleet.classify_sentiment")
def classify_sentiment(ctx: TaskContext, text: str, model: str | None = None) -> dict[str, Any]:
    """One model call: the sentiment of ``text`` as one of POSITIVE, NEGATIVE, NEUTRAL, MIXED."""
    prompt = sentiment_prompt(text)
    result = run_agent(ctx, prompt=prompt, model=model, max_tokens=SENTIMENT_MAX_TOKENS, max_turns=1)
    label = result.text.strip().strip(".").upper()
    if label not in LABELS:
        raise BadRequest(f"the model answered {result.text!r}, not one of {', '.join(LABELS)}")
    return {"label": label.lower(), "model": result.model}


_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def review_prompt(diff: str) -> str:
    """The prompt ``review_diff`` sends for one file's ``diff``: JSON findings, with severities
    calibrated (critical only for what ships and can be exploited; tests and docs at most low)."""
    return (
        "Review this diff for security and reliability problems. Reply with JSON only: "
        '{"findings": [{"file", "line", "severity", "rule", "message"}]}, '
        '{"findings": []} when there is nothing to report (a binary file, a rename). '
        "Severity is one of critical, high, medium, low: critical only for a flaw in code that "
        "ships and can be exploited as it is (a real credential, injection); in tests, fixtures "
        "and documentation, where fake credentials and unsafe calls are deliberate, at most low."
        "\n\n" + diff
    )


@fleet_task(name="agentfleet.review_diff")
def review_diff(ctx: TaskContext, diff: str, model: str | None = None) -> dict[str, Any]:
    """Review a unified diff; the findings (file, line, severity, rule, message) as a dict.

    Findings from many diffs merge with ``agentfleet.merge.merge_findings``.
    """
    result = run_agent(ctx, prompt=review_prompt(diff), model=model, max_tokens=2048, max_turns=1)
    match = _JSON_OBJECT.search(result.text)
    try:
        parsed = json.loads(match.group(0) if match else result.text)
    except ValueError:
        raise BadRequest(f"the review was not JSON: {result.text[:200]!r}") from None
    findings = parsed.get("findings", []) if isinstance(parsed, dict) else []
    return {"findings": findings}


@fleet_task(name="agentfleet.agent")
def agent(
    ctx: TaskContext,
    prompt: str,
    system: str | None = None,
    tools: list[str] | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    max_tokens: int = 1024,
) -> dict[str, Any]:
    """A general agent: ``prompt`` with built-in ``tools`` (``http_fetch``, ``run_command``)."""
    chosen = []
    for name in tools or []:
        if name not in BUILTIN_TOOLS:
            raise BadRequest(f"no built-in tool {name!r}; choose from {', '.join(sorted(BUILTIN_TOOLS))}")
        chosen.append(BUILTIN_TOOLS[name])
    result = run_agent(
        ctx,
        prompt=prompt,
        system=system,
        tools=chosen,
        model=model,
        max_turns=max_turns,
        max_tokens=max_tokens,
    )
    return result.as_dict()


for _task in (classify_sentiment, review_diff, agent):
    _task.uses_llm = True
