"""Claims that fence, against a real Redis and no worker: a delivery whose claim was taken over
stores nothing, the copy that lost learns the outcome that stands, a run ends when its last
outcome is stored, a renewal that races its own finish is no loss, and once a claim is lost the
fleet's own calls refuse to go on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from task_contexts import use_worker_settings, worker_context

from agentfleet.errors import ClaimLost
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.models import TaskOutcome
from agentfleet.runs import Claim, ClaimRenewer, MemoryStore, RunStore
from agentfleet.tasks.agent import Tool, run_agent
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.memory import StoredMemory

A, B = "nodeA:1:aaaa", "nodeB:2:bbbb"


@pytest.fixture
def runs(redis_client: redis.Redis, key_prefix: str) -> RunStore:
    store = RunStore(redis_client, prefix=key_prefix, ttl_s=3600)
    store.create_run("r", name="t", kind="map", task="t", items=[("r-0", "k0", "0")])
    return store


def _begin(runs: RunStore, token: str, ttl_s: float = 20.0) -> str:
    return runs.begin("r", "k0", "r-0", deliveries_ttl_s=60, token=token, claim_ttl_s=ttl_s).verdict


def _outcome(node: str) -> TaskOutcome:
    return TaskOutcome(
        task_id="r-0", run_id="r", item_key="0", ok=True, index=0, idempotency_key="k0", result={"node": node}
    )


def _lapse(runs: RunStore) -> None:
    """The claim's TTL ran out (its worker was cut off for longer than the TTL)."""
    runs.client.delete(runs.claim_key("k0"))


# The finish script -------------------------------------------------------------------------


def test_a_delivery_whose_claim_was_taken_over_stores_nothing(runs: RunStore) -> None:
    assert _begin(runs, A) == "claimed"
    _lapse(runs)
    assert _begin(runs, B) == "claimed"
    state = runs.finish(_outcome("A"), token=A)
    assert state.fenced and not state.recorded
    assert 0 < state.claim_left_s <= 20
    assert runs.stored_outcomes(["k0"]) == [None]
    assert runs.get_run("r")["done"] == "0"
    assert runs.client.get(runs.claim_key("k0")) == B, "the live claim is left alone"
    finished = runs.finish(_outcome("B"), token=B)
    assert finished.recorded and finished.run_ended and finished.stood is None
    assert runs.outcomes("r")[0].result == {"node": "B"}


def test_the_copy_that_lost_learns_the_outcome_that_stands(runs: RunStore) -> None:
    _begin(runs, A)
    _lapse(runs)
    _begin(runs, B)
    runs.finish(_outcome("B"), token=B)
    late = runs.finish(_outcome("A"), token=A)
    assert not late.fenced and not late.recorded
    assert late.stood is not None and late.stood.result == {"node": "B"}


def test_a_lapsed_claim_nobody_took_does_not_fence_the_outcome(runs: RunStore) -> None:
    _begin(runs, A)
    _lapse(runs)
    state = runs.finish(_outcome("A"), token=A)
    assert state.recorded and not state.fenced and state.stood is None
    assert runs.outcomes("r")[0].result == {"node": "A"}


def test_a_delivery_that_hands_its_item_back_is_no_step_towards_poison(runs: RunStore) -> None:
    counter = runs.keys.deliveries("k0", "r-0")
    _begin(runs, A)
    _lapse(runs)
    _begin(runs, B)
    assert runs.client.get(counter) == "2"
    # A's finish was refused and it hands the item back: its worker did not die.
    assert runs.uncount_delivery("r-0", "k0", A, mark_ttl_s=20)
    assert not runs.uncount_delivery("r-0", "k0", A, mark_ttl_s=20), "sent again, it changes nothing"
    assert runs.client.get(counter) == "1"
    # B's worker dies: the next delivery is the second that did not finish, not the third.
    _lapse(runs)
    begun = runs.begin("r", "k0", "r-0", deliveries_ttl_s=60, token="nodeC:3:cccc", claim_ttl_s=20)
    assert (begun.verdict, begun.deliveries) == ("claimed", 2)
    # A counter taken to nothing is gone, not left at zero.
    runs.uncount_delivery("r-0", "k0", B, mark_ttl_s=20)
    runs.uncount_delivery("r-0", "k0", "nodeC:3:cccc", mark_ttl_s=20)
    assert runs.client.exists(counter) == 0


def test_an_outcome_already_stored_is_returned_to_a_delivery_without_a_claim(runs: RunStore) -> None:
    runs.finish(_outcome("B"), token="")
    runs.client.set(runs.claim_key("k0"), B)
    state = runs.finish(_outcome("A"), token="")
    assert not state.fenced and state.stood is not None and state.stood.result == {"node": "B"}


def test_a_run_ends_at_redis_clock_when_its_last_outcome_is_stored(
    runs: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _begin(runs, A)
    # The worker's clock says its body ended long ago (its call then waited for a link to return).
    monkeypatch.setattr(time, "time", lambda: 1_000_000.0)
    state = runs.finish(_outcome("A"), token=A)
    monkeypatch.undo()
    assert state.run_ended
    seconds, micros = runs.client.time()
    assert float(runs.get_run("r")["ended_at"]) == pytest.approx(seconds + micros / 1e6, abs=2.0)


# The renewer -------------------------------------------------------------------------------


class _ReleasedFirst:
    """A run store whose renewal reaches Redis just after the delivery released the claim
    itself: by its finish (``how="finish"``: the delivery has not dropped the claim from the
    renewer yet) or to send the item again (``how="reschedule"``: dropped, then released)."""

    def __init__(self, runs: RunStore, renewer: ClaimRenewer, claim: Claim, how: str) -> None:
        self.runs, self.renewer, self.claim, self.how = runs, renewer, claim, how

    def renew_claims(self, held: dict[str, str], ttl_s: float) -> dict[str, bool]:
        if self.how == "finish":
            self.claim.finishing = True
            self.runs.finish(_outcome("A"), token=A)
        else:
            self.renewer.drop(self, "k0")
            self.runs.release_claim("k0", A)
        return self.runs.renew_claims(held, ttl_s)


@pytest.mark.parametrize("how", ["finish", "reschedule"])
def test_a_renewal_that_races_the_delivery_releasing_its_claim_is_no_loss(
    runs: RunStore, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    renewer = ClaimRenewer()
    _begin(runs, A)
    claim = Claim("k0", A, 20.0)
    store = _ReleasedFirst(runs, renewer, claim, how)
    renewer._held[(id(store), "k0")] = (store, claim)
    with caplog.at_level(logging.WARNING, logger="agentfleet.claims"):
        renewer.renew_now()
    assert not caplog.records
    assert not claim.lost


def test_a_claim_another_delivery_took_is_lost_and_said_once(
    runs: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    renewer = ClaimRenewer()
    _begin(runs, A, ttl_s=5)
    claim = renewer.hold(runs, "k0", A, 5.0)
    with caplog.at_level(logging.WARNING, logger="agentfleet.claims"):
        renewer.renew_now()
        assert not claim.lost and runs.client.pttl(runs.claim_key("k0")) > 4000
        runs.client.set(runs.claim_key("k0"), B)
        renewer.renew_now()
        renewer.renew_now()
    assert claim.lost and renewer.held() == 0
    assert [r.getMessage() for r in caplog.records] == [
        "the claim on k0 lapsed before its renewal; another copy may run it, and this one stops at "
        "its next fleet call"
    ]


def test_a_claim_held_after_the_renewer_was_idle_is_renewed_in_time(runs: RunStore) -> None:
    renewer = ClaimRenewer()
    _begin(runs, A, ttl_s=1.5)
    renewer.hold(runs, "k0", A, 1.5)
    time.sleep(0.6)
    renewer.drop(runs, "k0")
    runs.release_claim("k0", A)
    time.sleep(1.0)  # nothing held: the renewer is idle
    _begin(runs, B, ttl_s=1.5)
    claim = renewer.hold(runs, "k0", B, 1.5)
    try:
        time.sleep(2.5)
        assert runs.client.get(runs.claim_key("k0")) == B
        assert not claim.lost
    finally:
        renewer.drop(runs, "k0")


class _Keeps:
    """A run store whose renewals keep every claim but ``gone``."""

    def __init__(self, gone: str = "") -> None:
        self.gone = gone

    def renew_claims(self, held: dict[str, str], ttl_s: float) -> dict[str, bool]:
        return {key: key != self.gone for key in held}


def test_the_renewers_turns_follow_the_shortest_ttl_still_held() -> None:
    renewer, store = ClaimRenewer(), _Keeps(gone="short")
    renewer.hold(store, "a", A, 30.0)
    began = renewer.renew_due - 10.0  # the turns start when the first claim is held
    renewer.hold(store, "b", A, 30.0)
    renewer.hold(store, "short", A, 3.0)
    assert renewer.renew_due - began == pytest.approx(1.0)
    renewer.renew_now()  # the short claim is found gone: the turns slow to the others' TTL
    assert renewer.held() == 2
    assert renewer.renew_due - began == pytest.approx(10.0)
    renewer.hold(store, "a", A, 6.0)  # held again with a shorter TTL: it replaces the first
    assert renewer.held() == 2
    assert renewer.renew_due - began == pytest.approx(2.0)
    renewer.drop(store, "a")
    renewer.drop(store, "a")  # twice: nothing more to drop
    assert renewer.renew_due - began == pytest.approx(10.0)
    renewer.drop(store, "b")
    assert renewer.held() == 0 and renewer.renew_due == float("inf")


def test_a_claim_no_renewal_confirmed_for_its_ttl_is_presumed_lost() -> None:
    claim = Claim("k0", A, 3.0, confirmed_at=time.monotonic() - 2.0)
    assert not claim.lost
    claim.confirm(time.monotonic() - 2.9)  # an older renewal confirms nothing new
    assert not claim.lost
    late = Claim("k0", A, 3.0, confirmed_at=time.monotonic() - 3.0)
    assert late.lost
    late.confirm(time.monotonic())
    assert late.lost, "a lost claim never turns back"
    with pytest.raises(ClaimLost, match=r"no renewal of it reached Redis for 3 s"):
        late.check()


# The fleet's own calls ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture
def make_ctx(
    mock: MockMessagesServer, redis_url: str, key_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., TaskContext]]:
    mock.reset()
    use_worker_settings(monkeypatch, redis_url=redis_url, key_prefix=key_prefix, llm_url=mock.url)
    made: list[TaskContext] = []

    def make(claim: Claim, **state: Any) -> TaskContext:
        ctx = worker_context(f"task-{len(made)}", tmp_path, claim=claim, token=claim.token, **state)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


def _model_calls(mock: MockMessagesServer) -> int:
    return len([r for r in mock.requests if r.path == "/v1/messages"])


def test_a_context_says_its_claim_is_lost_and_its_calls_refuse(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    claim = Claim("k0", A, 20.0)
    ctx = make_ctx(claim)
    assert not ctx.claim_lost
    assert ctx.step("fetch", lambda: 1) == 1
    claim.lose("another delivery holds it")
    assert ctx.claim_lost
    ran: list[int] = []
    with pytest.raises(ClaimLost, match="another delivery holds it"):
        ctx.check_claim()
    with pytest.raises(ClaimLost):
        ctx.step("write", lambda: ran.append(1))
    with pytest.raises(ClaimLost):
        ctx.http.get(f"{mock.url}/v1/models")
    with pytest.raises(Exception) as raised:
        ctx.anthropic.messages.create(
            model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert isinstance(raised.value.__cause__, ClaimLost), "the SDK wraps what the transport raised"
    assert ran == [] and mock.requests == [], "nothing was run or sent"


def test_a_checkpoint_is_not_written_once_the_claim_is_lost(runs: RunStore) -> None:
    claim = Claim("k0", A, 20.0)
    _begin(runs, A)
    memory = StoredMemory(MemoryStore(runs.client, prefix=runs.prefix, ttl_s=60), "k0", token=A, claim=claim)
    memory.write("a0", {"turns": 1})
    claim.lose("it lapsed")
    with pytest.raises(ClaimLost):
        memory.write("a0", {"turns": 2})
    assert memory.read(["a0"]) == {"a0": {"turns": 1}}


def test_an_agent_stops_at_its_next_call_once_a_tool_finds_the_claim_lost(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    claim = Claim("k0", A, 20.0)
    ctx = make_ctx(claim)
    tried: list[str] = []

    def lookup(tool_ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
        tried.append(args["q"])
        claim.lose("another delivery holds it")
        tool_ctx.check_claim()  # not turned into an is_error tool result
        return {"answer": 42}

    tool = Tool("lookup", "Looks up.", {"type": "object", "properties": {"q": {"type": "string"}}}, lookup)
    with pytest.raises(ClaimLost):
        run_agent(ctx, prompt='CALL lookup {"q": "life"}', tools=[tool], model="claude-haiku-4-5")
    assert tried == ["life"]
    assert _model_calls(mock) == 1, "the model was not called again"


def test_an_agent_with_a_lost_claim_makes_no_model_call(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    claim = Claim("k0", A, 20.0)
    claim.lose("it lapsed")
    with pytest.raises(ClaimLost):
        run_agent(make_ctx(claim), prompt="hello", model="claude-haiku-4-5")
    assert _model_calls(mock) == 0
