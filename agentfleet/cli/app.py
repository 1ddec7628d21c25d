"""The ``agentfleet`` command line (``--version``; ``--install-completion`` for the shell)."""

from __future__ import annotations

import typer

from agentfleet import __version__
from agentfleet.cli.approvals_cmd import approvals_app
from agentfleet.cli.beat_cmd import beat
from agentfleet.cli.creds_cmd import creds_app
from agentfleet.cli.demo_cmd import demo
from agentfleet.cli.dev_cmd import dev
from agentfleet.cli.dlq_cmd import dlq_app
from agentfleet.cli.flower_cmd import flower
from agentfleet.cli.healthcheck_cmd import healthcheck_app
from agentfleet.cli.limits_cmd import limits_app
from agentfleet.cli.mcp_cmd import mcp
from agentfleet.cli.mock_llm_cmd import mock_llm
from agentfleet.cli.run_cmd import run
from agentfleet.cli.runs_cmd import runs_app
from agentfleet.cli.serve_cmd import serve
from agentfleet.cli.worker_cmd import worker

__all__ = ["app"]

app = typer.Typer(
    name="agentfleet",
    help="Run fleets of parallel LLM-agent tasks on Celery and Redis.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"agentfleet {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run fleets of parallel LLM-agent tasks on Celery and Redis."""


app.command("demo")(demo)
app.command("dev")(dev)
app.command("run")(run)
# Options agentfleet does not know are Celery's: they are passed on to `celery worker`.
app.command("worker", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(worker)
app.add_typer(runs_app, name="runs")
app.add_typer(dlq_app, name="dlq")
app.add_typer(approvals_app, name="approvals")
app.command("serve")(serve)
app.command("flower")(flower)
app.command("beat")(beat)
app.add_typer(healthcheck_app, name="healthcheck")
app.command("mock-llm")(mock_llm)
app.add_typer(creds_app, name="creds")
app.add_typer(limits_app, name="limits")
app.command("mcp")(mcp)
