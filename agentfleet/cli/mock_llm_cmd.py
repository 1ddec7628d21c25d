"""``agentfleet mock-llm``: the mock Anthropic Messages API, served until Ctrl-C."""

from __future__ import annotations

import typer

from agentfleet.cli.output import console
from agentfleet.mock_llm import DEFAULT_PORT, MockMessagesServer, parse_error_rates, serve

__all__ = ["mock_llm"]

_ERROR_RATE = typer.Option(
    [], "--error-rate", metavar="STATUS=RATE", help="Answer this HTTP error at this rate, e.g. 529=0.05."
)
_API_KEY = typer.Option(
    [], "--api-key", help="Accept only this key (repeatable; default: any key).", metavar="KEY"
)


def _announce(server: MockMessagesServer) -> None:
    console.print(f"mock Messages API on {server.url} (Ctrl-C to stop)", highlight=False, soft_wrap=True)
    console.print(
        f"point workers at it: export AGENTFLEET_LLM__BASE_URL={server.url}", highlight=False, soft_wrap=True
    )


def mock_llm(
    host: str = typer.Option("127.0.0.1", help="Address to listen on.", metavar="HOST"),
    port: int = typer.Option(
        DEFAULT_PORT, min=0, max=65535, help="Port to listen on; 0 picks a free one.", metavar="PORT"
    ),
    latency: str = typer.Option(
        "0",
        help="Reply latency in seconds: S, fixed:S, uniform:LO,HI or lognormal:MEDIAN,SIGMA[,MAX].",
        metavar="SPEC",
    ),
    requests_per_min: float | None = typer.Option(
        None, min=0, help="Requests a minute before a 429.", metavar="N"
    ),
    input_tokens_per_min: float | None = typer.Option(
        None, min=0, help="Input tokens a minute before a 429.", metavar="N"
    ),
    output_tokens_per_min: float | None = typer.Option(
        None, min=0, help="Output tokens a minute before a 429.", metavar="N"
    ),
    tokens_per_min: float | None = typer.Option(
        None, min=0, help="Input plus output tokens a minute.", metavar="N"
    ),
    error_rate: list[str] = _ERROR_RATE,
    api_key: list[str] = _API_KEY,
    seed: int = typer.Option(0, help="Seed for latency draws, injected errors and ids.", metavar="N"),
) -> None:
    """Serve a mock Anthropic Messages API, for offline runs.

    It listens on loopback until Ctrl-C; tests and the demo use it too.
    """
    serve(
        host,
        port,
        on_ready=_announce,
        latency=latency,
        requests_per_min=requests_per_min,
        input_tokens_per_min=input_tokens_per_min,
        output_tokens_per_min=output_tokens_per_min,
        tokens_per_min=tokens_per_min,
        error_rates=parse_error_rates(error_rate),
        api_key=api_key or None,
        seed=seed,
    )
    console.print("mock Messages API stopped")
