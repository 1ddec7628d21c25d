"""The service and the console against a hostile caller, on a real Redis (no workers).

Each test is an attack that worked before: guessing the token as fast as the service
answers, a session cookie copied before sign-out, a secret in a run's name, NaN in a body,
a ``since`` too far back for Redis, direction overrides in a name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from agentfleet.access import AuthThrottle, client_key
from agentfleet.config import Settings, load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.service import create_app

TOKEN = "sec-" + "0123456789abcdef" * 2
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer guess-0000000000000000000000000000"}
SECRET = "sk-live-very-secret-value-42"
HOST = "http://testserver"


@pytest.fixture
def settings(redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("VENDOR_TOKEN", SECRET)
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={"agents": f"{key_prefix}.a", "fanin": f"{key_prefix}.f", "maintenance": f"{key_prefix}.m"},
        service={"token": TOKEN},
        dispatch={"require_workers": False},
        credentials={"vendor": {"env": "VENDOR_TOKEN", "domains": ["vendor-a.example"]}},
        fanouts={"echoes": {"task": "t.echo"}},
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url=HOST) as test_client:
        yield test_client


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


def _sign_in(client: TestClient, token: str = TOKEN) -> int:
    form = client.get("/console/login")
    response = client.post(
        "/console/login",
        data={"csrf": _csrf(form.text), "token": token},
        headers={"Origin": HOST},
        follow_redirects=False,
    )
    return response.status_code


# Guessing --------------------------------------------------------------------------------


def test_wrong_bearer_tokens_are_answered_429_after_a_few(client: TestClient) -> None:
    codes = [client.get("/runs", headers=WRONG).status_code for _ in range(8)]
    assert codes[:6] == [401] * 6 and codes[6:] == [429, 429], codes
    refused = client.get("/runs", headers=WRONG)
    assert int(refused.headers["Retry-After"]) >= 1
    assert "too many failed" in refused.json()["error"]
    assert client.get("/runs", headers=AUTH).status_code == 429, "a locked address's guesses are not checked"


def test_another_address_is_not_locked_out_by_someone_elses_guessing(
    settings: Settings, client: TestClient
) -> None:
    for _ in range(8):
        client.post("/runs", headers=WRONG, json={"fanout": "echoes", "inputs": []})
    assert client.get("/runs", headers=AUTH).status_code == 429
    with TestClient(create_app(settings), base_url=HOST, client=("10.20.30.40", 5000)) as operator:
        assert operator.get("/runs", headers=AUTH).status_code == 200


def test_every_service_process_agrees_on_a_lock(settings: Settings, client: TestClient) -> None:
    for _ in range(7):
        client.get("/runs", headers=WRONG)
    with TestClient(create_app(settings), base_url=HOST) as second_process:
        assert second_process.get("/runs", headers=WRONG).status_code == 429


def test_failed_checks_are_logged_without_the_guess(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentfleet.service"):
        for _ in range(7):
            client.get("/runs", headers=WRONG)
    lines = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert lines and "testclient" in lines[0] and "/runs" in lines[0]
    assert not any("guess-0000" in line for line in lines)


def test_passing_a_check_forgets_the_failures_before_it(client: TestClient) -> None:
    for _ in range(5):
        assert client.get("/runs", headers=WRONG).status_code == 401
    assert client.get("/runs", headers=AUTH).status_code == 200
    codes = [client.get("/runs", headers=WRONG).status_code for _ in range(6)]
    assert codes == [401] * 6, "a typo after signing in starts a fresh count"


def test_a_token_shown_to_a_path_that_checks_none_does_not_clear_the_count(client: TestClient) -> None:
    for _ in range(5):
        client.get("/runs", headers=WRONG)
    assert client.get("/health", headers=WRONG).status_code == 200
    assert client.get("/runs", headers=WRONG).status_code == 401
    assert client.get("/runs", headers=WRONG).status_code == 429


def test_lockouts_double_up_to_the_longest(settings: Settings, fleet: Fleet) -> None:
    throttle = AuthThrottle(
        fleet.store.client, prefix=settings.key_prefix, free=2, lockout_s=1, max_lockout_s=5
    )
    lockouts = [throttle.failed("203.0.113.9").lockout_s for _ in range(7)]
    assert lockouts == [0, 0, 1, 2, 4, 5, 5]
    assert 4 < throttle.wait_s("203.0.113.9") <= 5
    assert throttle.wait_s("203.0.113.10") == 0
    throttle.passed("203.0.113.9")
    assert throttle.wait_s("203.0.113.9") == 0


def test_an_ipv6_client_counts_by_its_64() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("192.0.2.7") == "192.0.2.7"


def test_console_sign_ins_are_throttled_too(client: TestClient) -> None:
    codes = [_sign_in(client, token="x" * 40) for _ in range(7)]
    assert codes[:6] == [401] * 6 and codes[6] == 429, codes


def test_a_wrong_bearer_token_on_a_console_page_is_a_failed_check(client: TestClient) -> None:
    assert client.get("/console/runs", headers=WRONG, follow_redirects=False).status_code == 401


# Sessions --------------------------------------------------------------------------------


def test_sign_out_ends_the_session_on_the_server(
    settings: Settings, client: TestClient, fleet: Fleet
) -> None:
    fleet.store.create_run(
        "0123456789abcdef", name="victim", kind="map", task="t.echo", items=[("t-0", "k0", "0")]
    )
    assert _sign_in(client) == 303
    copied = client.cookies.get("af_console")
    assert copied
    page = client.get("/console/runs")
    client.post("/console/logout", data={"csrf": _csrf(page.text)}, headers={"Origin": HOST})
    with TestClient(create_app(settings), base_url=HOST, cookies={"af_console": copied}) as thief:
        assert thief.get("/console/runs", follow_redirects=False).status_code == 303
        cancel = thief.post(
            "/console/runs/0123456789abcdef/cancel",
            data={"csrf": _csrf(page.text)},
            headers={"Origin": HOST},
            follow_redirects=False,
        )
        assert cancel.status_code == 303 and "/login" in cancel.headers["location"]
    assert fleet.store.get_run("0123456789abcdef")["status"] == "running"


def test_sign_out_everywhere_ends_every_session(settings: Settings, client: TestClient) -> None:
    with TestClient(create_app(settings), base_url=HOST) as laptop:
        assert _sign_in(client) == 303 and _sign_in(laptop) == 303
        page = client.get("/console/runs")
        client.post("/console/logout/everywhere", data={"csrf": _csrf(page.text)}, headers={"Origin": HOST})
        assert laptop.get("/console/runs", follow_redirects=False).status_code == 303
        assert client.get("/console/runs", follow_redirects=False).status_code == 303


# What a user names -----------------------------------------------------------------------


def test_a_secret_in_a_run_name_is_never_stored_or_shown(client: TestClient, fleet: Fleet) -> None:
    run = fleet.map("t.echo", [{"n": 1}], name=f"nightly {SECRET}")
    assert SECRET not in fleet.store.client.hget(fleet.store.run_key(run.id), "name")
    assert client.get("/runs", headers=AUTH).json()["runs"][0]["name"] == "nightly [REDACTED]"
    assert SECRET not in client.get(f"/runs/{run.id}", headers=AUTH).text
    assert _sign_in(client) == 303
    for path in ("/console/runs", f"/console/runs/{run.id}"):
        page = client.get(path)
        assert "nightly [REDACTED]" in page.text and SECRET not in page.text


@pytest.mark.parametrize(
    "options",
    [
        {"key": lambda item: f"invoice-{SECRET}"},
        {"tenant": "sk-live-very-secret-value-42"},
        {"key": lambda item: "k" * 513},
    ],
)
def test_keys_and_tenants_that_hold_a_secret_or_are_too_long_are_refused(
    fleet: Fleet, options: dict[str, object]
) -> None:
    with pytest.raises(DispatchError, match=r"secret|characters"):
        fleet.map("t.echo", [{"n": 1}], **options)  # type: ignore[arg-type]
    assert fleet.runs() == []


def test_a_long_run_name_is_cut_to_200_characters(fleet: Fleet) -> None:
    run = fleet.map("t.echo", [{"n": 1}], name="n" * 5000)
    assert fleet.store.summary(run.id).name == "n" * 197 + "..."


def test_direction_overrides_and_control_characters_are_shown_escaped(
    client: TestClient, fleet: Fleet
) -> None:
    run = fleet.map("t.echo", [{"n": 1}], name="invoice\u202egpj.exe \x1b[31mred")
    assert _sign_in(client) == 303
    page = client.get(f"/console/runs/{run.id}").text
    assert "\u202e" not in page and "\x1b" not in page
    assert "invoice\\u202egpj.exe \\u001b[31mred" in page


# Numbers and bodies ----------------------------------------------------------------------


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_body_with_nan_or_infinity_is_refused(client: TestClient, constant: str) -> None:
    body = '{"fanout": "echoes", "inputs": [{"n": ' + constant + "}]}"
    response = client.post("/runs", headers={**AUTH, "Content-Type": "application/json"}, content=body)
    assert response.status_code == 422 and constant in response.json()["error"]


def test_inputs_holding_nan_are_refused_at_dispatch(fleet: Fleet) -> None:
    with pytest.raises(DispatchError, match="NaN or Infinity"):
        fleet.map("t.echo", [{"n": float("nan")}])


@pytest.mark.parametrize("since", ["99999999999999999999d", "1e400s", "60000w", "9999-12-31T23:59:59+14:00x"])
def test_a_since_redis_cannot_use_is_a_422_not_a_503(client: TestClient, since: str) -> None:
    assert _sign_in(client) == 303
    response = client.get("/console/dlq", params={"since": since})
    assert response.status_code == 422, response.status_code


def test_the_cli_shows_a_hostile_run_name_escaped(fleet: Fleet, settings: Settings) -> None:
    from typer.testing import CliRunner

    from agentfleet.cli.app import app

    fleet.map("t.echo", [{"n": 1}], name="invoice\u202egpj.exe \x1b[2J[bold red]x[/]")
    env = {
        "AGENTFLEET_BROKER_URL": settings.broker_url,
        "AGENTFLEET_KEY_PREFIX": settings.key_prefix,
        "COLUMNS": "250",
    }
    out = CliRunner().invoke(app, ["runs", "list"], env=env).output
    assert "\u202e" not in out and "\x1b" not in out
    assert "invoice\\u202egpj.exe" in out and "[bold red]x[/]" in out, out
