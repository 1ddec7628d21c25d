"""Map, pipeline and run handles against real Redis and two real worker processes."""

from __future__ import annotations

import uuid
from pathlib import Path

import fleet_test_tasks as tt
import pytest
import redis

from agentfleet import LocalCluster, RunError

pytestmark = pytest.mark.slow


def test_map_with_chord_fan_in_over_200_items(cluster: LocalCluster) -> None:
    run = cluster.fleet().map(tt.echo, [{"n": i} for i in range(200)], aggregate=tt.sum_n)
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 200
    assert summary.failed == 0
    assert summary.timed_out == 0
    assert run.result(timeout_s=30) == sum(range(200))


def test_aggregate_sees_successful_results_in_input_order(cluster: LocalCluster) -> None:
    inputs = [{"n": i, "fail": i in (3, 11)} for i in range(20)]
    run = cluster.fleet().map(tt.maybe_fail, inputs, aggregate="agentfleet.merge:concat")
    run.wait(timeout_s=60)
    merged = run.result(timeout_s=30)
    assert [r["n"] for r in merged] == [i for i in range(20) if i not in (3, 11)]


def test_permanent_failure_is_counted_not_merged_and_others_go_on(cluster: LocalCluster) -> None:
    inputs = [{"n": i, "fail": i == 5} for i in range(30)]
    run = cluster.fleet().map(tt.maybe_fail, inputs, aggregate=tt.count_results)
    summary = run.wait(timeout_s=60)
    assert (summary.succeeded, summary.failed) == (29, 1)
    assert run.result(timeout_s=30) == 29
    failed = [o for o in run.outcomes() if not o.ok]
    assert [o.index for o in failed] == [5]
    assert failed[0].error_type == "PermanentError"
    assert failed[0].attempts == 1


def test_pipeline_of_three_stages_over_20_items(cluster: LocalCluster) -> None:
    urls = [{"url": f"https://site{i}.example/page"} for i in range(19)] + [{"url": "https://broken.example"}]
    run = cluster.fleet().pipeline([tt.stage_fetch, tt.stage_extract, tt.stage_report], urls)
    summary = run.wait(timeout_s=60)
    assert (summary.succeeded, summary.failed) == (19, 1)
    outcomes = run.outcomes()
    assert outcomes[0].result == {"report": "https://site0.example/page: 3 words"}
    assert outcomes[19].ok is False
    assert outcomes[19].error == "cannot report on a broken page"
    assert all(o.attempts == 3 for o in outcomes[:19])


def test_a_pipeline_fans_in_its_last_stages_results(cluster: LocalCluster) -> None:
    run = cluster.fleet().pipeline([tt.echo, tt.echo], [{"n": n} for n in range(5)], aggregate=tt.sum_n)
    assert run.wait(timeout_s=60).succeeded == 5
    assert run.result(timeout_s=30) == sum(range(5))


def test_a_fail_fast_pipeline_cancels_what_has_not_started(cluster: LocalCluster) -> None:
    inputs = [{"n": 0, "fail": True}] + [{"n": i, "sleep_s": 0.3} for i in range(1, 40)]
    run = cluster.fleet().pipeline([tt.maybe_fail_slowly, tt.echo], inputs, fail_fast=True)
    summary = run.wait(timeout_s=60)
    assert (summary.status, summary.failed) == ("failed", 1)
    assert summary.cancelled > 0, "items that had not started were skipped"
    assert summary.succeeded + summary.failed + summary.cancelled == 40


def test_as_completed_yields_in_completion_order(cluster: LocalCluster) -> None:
    inputs = [{"n": i, "sleep_s": 0.3 * (6 - i)} for i in range(6)]
    run = cluster.fleet().map(tt.sleepy, inputs)
    order = [o.result["n"] for o in run.as_completed(timeout_s=30)]
    assert order == [5, 4, 3, 2, 1, 0]


def test_first_returns_quorum_and_cancels_the_rest(cluster: LocalCluster, redis_client: redis.Redis) -> None:
    token = uuid.uuid4().hex
    inputs = [{"token": token, "sleep_s": 0.4} for _ in range(60)]
    run = cluster.fleet().map(tt.counted, inputs)
    winners = run.first(3, timeout_s=30)
    assert len(winners) == 3 and all(w.ok for w in winners)
    summary = run.wait(timeout_s=30)
    assert summary.timed_out == 0, "every item ends: done, or cancelled"
    assert summary.cancelled > 0
    assert summary.succeeded + summary.cancelled == 60
    assert int(redis_client.get(f"test:exec:{token}") or 0) < 60


def test_wait_reports_stragglers_as_timed_out(cluster: LocalCluster) -> None:
    inputs = [{"n": i, "sleep_s": 0.0} for i in range(4)] + [{"n": 4, "sleep_s": 5.0}]
    run = cluster.fleet().map(tt.sleepy, inputs)
    summary = run.wait(timeout_s=2.0)
    assert summary.succeeded == 4
    assert summary.timed_out == 1
    assert summary.timed_out_ids == [f"{run.id}-4"]
    later = run.wait(timeout_s=15)
    assert (later.succeeded, later.timed_out) == (5, 0)


def test_redispatching_a_finished_key_does_not_run_it_again(
    cluster: LocalCluster, redis_client: redis.Redis
) -> None:
    token = uuid.uuid4().hex
    fleet = cluster.fleet()
    first = fleet.map(tt.counted, [{"token": token}], key=lambda x: f"invoice-{token}")
    assert first.wait(timeout_s=30).succeeded == 1
    second = fleet.map(tt.counted, [{"token": token}], key=lambda x: f"invoice-{token}")
    assert second.wait(timeout_s=30).succeeded == 1
    # The stored outcome of the first run; an input under a secret-named key ("token") is
    # stored redacted, as every result is.
    assert second.outcomes()[0].result == {"token": "[REDACTED]", "executions": 1}
    assert redis_client.get(f"test:exec:{token}") == "1"


def test_default_keys_run_the_same_inputs_again_in_a_new_run(
    cluster: LocalCluster, redis_client: redis.Redis
) -> None:
    token = uuid.uuid4().hex
    fleet = cluster.fleet()
    for _ in range(2):
        assert fleet.map(tt.counted, [{"token": token}]).wait(timeout_s=30).succeeded == 1
    assert redis_client.get(f"test:exec:{token}") == "2"


def test_invalid_input_fails_without_retry(cluster: LocalCluster) -> None:
    # By name, dispatch checks the input's keys only: the worker validates the types.
    run = cluster.fleet().map("fleet_test_tasks.echo", [{"n": "not a number"}, {"n": [1]}])
    summary = run.wait(timeout_s=30)
    assert summary.failed == 2 and summary.retries == 0
    errors = sorted(o.error or "" for o in run.outcomes())
    assert "n: Input should be a valid integer" in errors[0] + errors[1]
    assert all(o.error_type == "InvalidInput" and o.attempts == 1 for o in run.outcomes())


def test_result_without_aggregate_is_an_error(cluster: LocalCluster) -> None:
    run = cluster.fleet().map(tt.echo, [{"n": 1}])
    run.wait(timeout_s=30)
    with pytest.raises(RunError, match="no aggregate"):
        run.result(timeout_s=1)


def test_runs_are_listed_newest_first(cluster: LocalCluster) -> None:
    fleet = cluster.fleet()
    run = fleet.map(tt.echo, [{"n": 1}], name="listing-check")
    run.wait(timeout_s=30)
    newest = fleet.runs(limit=5)
    assert newest[0].run_id == run.id
    assert newest[0].name == "listing-check"
    assert newest[0].status == "finished"


def test_fail_fast_cancels_what_has_not_started_and_the_aggregate(cluster: LocalCluster) -> None:
    inputs = [{"n": 0, "fail": True}] + [{"n": i, "sleep_s": 0.3} for i in range(1, 40)]
    fleet = cluster.fleet()
    run = fleet.map(tt.maybe_fail_slowly, inputs, aggregate=tt.count_results, fail_fast=True)
    summary = run.wait(timeout_s=60)
    assert summary.status == "failed"
    assert summary.failed == 1
    assert summary.cancelled > 0, "items that had not started were skipped"
    assert summary.succeeded + summary.failed + summary.cancelled == 40
    with pytest.raises(RunError, match="fails fast"):
        run.result(timeout_s=30)


def test_a_workdir_is_made_only_when_used_and_removed_after(cluster: LocalCluster) -> None:
    run = cluster.fleet().map(tt.use_workdir, [{"write": True}, {"write": False}])
    assert run.wait(timeout_s=30).succeeded == 2
    used, unused = (o.result for o in run.outcomes())
    assert used["made"], "made on first use"
    assert not Path(used["path"]).exists(), "removed when the task ended"
    assert not unused["made"]


def test_a_pool_run_never_has_more_than_max_in_flight_items_executing(cluster: LocalCluster) -> None:
    run = cluster.fleet().map(tt.timed, [{"n": i, "sleep_s": 0.4} for i in range(12)], max_in_flight=3)
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 12 and summary.retries == 0
    spans = [(o.result["start"], o.result["end"]) for o in run.outcomes()]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap <= 3, f"{overlap} items ran at once"
    assert overlap == 3, "the pool's three slots were used"
    assert summary.deferrals > 0, "the items beyond the pool waited without using retries"
