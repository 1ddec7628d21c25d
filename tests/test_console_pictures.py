"""The console's pictures as pure functions: timeline entries, histograms, charts, timelines.

No Redis and no workers: each builder gets the data it draws and the test reads the SVG back.
"""

from __future__ import annotations

import os
import re

import pytest

from agentfleet.models import RunSummary
from agentfleet.registry import TaskInfo, WorkerRecord
from agentfleet.runs import Minute, Span, SpanLog
from agentfleet.runs.history import ITEM_TIME_BOUNDS_S, item_time_bucket, percentile
from agentfleet.runs.spans import parse_spans
from agentfleet.service.console.charts import Series, bar_chart, line_chart
from agentfleet.service.console.series import Window, fleet_charts, run_charts, run_window
from agentfleet.service.console.svg import nice_max, number
from agentfleet.service.console.timeline import BINS, ITEM_LIMIT, build_timeline
from agentfleet.tasks.worker_load import read_load, rss_bytes

T0 = 1_800_000_000.0
SECRET = "sk-live-very-secret-value"


def _shown(text: str) -> str:
    return text.replace(SECRET, "[REDACTED]")


def _span(index: int, lane: int, start_s: float, end_s: float, kind: str = "s") -> Span:
    return Span(index, lane, round((T0 + start_s) * 1000), round((T0 + end_s) * 1000), kind)


def _window(seconds: float, bins: int = 60) -> Window:
    return Window(start=T0, step_s=seconds / bins, bins=bins)


# Timeline entries ------------------------------------------------------------------------


def test_timeline_entries_parse_with_their_worker_event_and_cost() -> None:
    log = parse_spans(
        ["3 0 1800000001500-0 500 s 1250", "4 1 1800000002000 250 r", "5 -1 1800000003000-1 0 c"],
        {"w1@host": "0", "w2@host": "1"},
    )
    first = log.spans[0]
    assert (first.index, first.start_ms, first.end_ms, first.cost_usd) == (
        3,
        1800000001000,
        1800000001500,
        0.00125,
    )
    assert first.event == "1800000001500-0" and log.worker(first.lane) == "w1@host"
    assert log.spans[1].event == "" and not log.spans[1].final
    assert log.worker(-1) == "" and sorted(log.finals) == [3, 5]


def test_a_reopened_item_has_no_standing_outcome_until_its_next_one() -> None:
    entries = ["7 0 1800000001000-0 10 f", "7 -1 1800000002000-0 0 o"]
    assert parse_spans(entries, {}).finals == {}
    again = parse_spans([*entries, "7 1 1800000003000-0 20 s"], {})
    assert again.finals[7].kind == "s" and again.finals[7].lane == 1


def test_entries_that_do_not_parse_are_skipped() -> None:
    log = parse_spans(["", "x 0 1 2 s", "1 0 1800000000000 5", "2 0 1800000000000 5 s"], {"w": "zero"})
    assert [s.index for s in log.spans] == [2] and log.lanes == {}


# The fleet's minutes -----------------------------------------------------------------------


def test_item_times_fall_in_the_bucket_of_their_upper_bound() -> None:
    assert item_time_bucket(0.05) == 0 and item_time_bucket(0.1) == 0 and item_time_bucket(0.11) == 1
    assert item_time_bucket(10_000) == len(ITEM_TIME_BOUNDS_S)


def test_a_percentile_interpolates_inside_its_bucket() -> None:
    buckets = [0] * (len(ITEM_TIME_BOUNDS_S) + 1)
    buckets[item_time_bucket(1.5)] = 10  # every item between 1 s and 2 s
    assert percentile(buckets, 0.5) == pytest.approx(1.5)
    assert percentile(buckets, 1.0) == pytest.approx(2.0)
    assert percentile([0] * len(buckets), 0.5) is None
    buckets[-1] = 90
    assert percentile(buckets, 0.99) == ITEM_TIME_BOUNDS_S[-1], "the open bucket reads as its floor"


def test_the_fleet_charts_draw_an_hour_with_gaps_where_no_heartbeat_was() -> None:
    minutes = [Minute(at=T0 + 60 * m) for m in range(60)]
    minutes[-1] = Minute(
        at=T0 + 3540, counts={"succeeded": 30, "failed": 5}, queued=12, unacked=3, busy=4, slots=8
    )
    finished, item_time, queues, spend, trouble = fleet_charts(minutes)
    assert "peak 35 at" in finished.summary and finished.top == "50"
    assert item_time.summary.endswith("nothing yet")
    assert "waiting in queues 12" in queues.summary and "busy slots 4" in queues.summary
    assert queues.svg.count("<polyline") == 3, "one point a line: the minutes before are gaps"
    assert "peak 5 at" in trouble.summary and spend.top == "$1.0000"


# Charts ------------------------------------------------------------------------------------


def test_stacked_bars_rise_in_proportion_under_a_round_top() -> None:
    chart = bar_chart(
        "Items", "", [T0, T0 + 60], 60, [Series("ok", "k-s", [30, 0]), Series("failed", "k-f", [10, 0])]
    )
    assert chart.top == "50" and nice_max(40) == 50
    heights = [float(h) for h in re.findall(r"v([\d.]+)h", chart.svg)]
    assert heights == pytest.approx([120 * 30 / 50, 120 * 10 / 50])
    assert chart.svg.count('class="k-s"') == 1 and chart.svg.count('class="k-f"') == 1
    assert 'aria-label="Items: peak 40 at' in chart.svg


def test_a_line_breaks_where_values_are_missing() -> None:
    chart = line_chart(
        "p50", "", [T0 + i for i in range(5)], 1, [Series("p50", "line-a", [1, 2, None, 4, None])]
    )
    assert chart.svg.count("<polyline") == 2
    assert "p50 4" in chart.summary


def test_figures_on_scales_stay_short() -> None:
    assert [number(v) for v in (0, 0.25, 7, 350, 1234, 56_789)] == ["0", "0.25", "7", "350", "1.2k", "57k"]
    assert number(0.004, "$") == "$0.0040" and number(None) == "-"


# A run's course ----------------------------------------------------------------------------


def _summary(total: int, created: float, ended: float | None) -> RunSummary:
    return RunSummary(run_id="r", name="r", tasks_total=total, created_at=created, ended_at=ended)


def test_a_runs_window_fits_at_most_60_bins_of_a_round_step() -> None:
    log = SpanLog([_span(0, 0, 0, 170)], {0: "w"}, {})
    window = run_window(_summary(1, T0, T0 + 170), log, now=T0 + 500)
    assert window.step_s == 5 and window.bins == 34 and window.start == T0


def test_a_long_runs_window_is_its_last_hour() -> None:
    log = SpanLog([_span(0, 0, 0, 7200)], {0: "w"}, {})
    window = run_window(_summary(1, T0, T0 + 7200), log, now=T0 + 7300)
    assert window.end >= T0 + 7200 and window.start >= T0 + 3600 - 60


def test_a_runs_charts_count_outcomes_and_what_still_waits() -> None:
    spans = [_span(i, 0, i, i + 0.5, "f" if i == 3 else "s") for i in range(6)] + [_span(2, 0, 1, 1.2, "r")]
    log = SpanLog(spans, {0: "w"}, {s.index: s for s in spans if s.final})
    finished, attempt_time, waiting, _, trouble = run_charts(_summary(8, T0, None), log, _window(60))
    assert "peak 1 at" in finished.summary and "retried" in [name for name, _ in trouble.legend]
    assert "waiting 2" in waiting.summary, "8 items, 6 with an outcome"
    assert "longest 0.5" in attempt_time.summary


# Timelines ---------------------------------------------------------------------------------


def test_up_to_the_item_limit_each_attempt_is_a_bar_linked_to_its_item() -> None:
    spans = [_span(0, 0, 0, 10), _span(1, 0, 5, 15, "f"), _span(2, 0, 12, 20), _span(3, 1, 0, 1, "r")]
    log = SpanLog(spans, {0: "w1@host", 1: "w2@host"}, {})
    timeline = build_timeline(log, _window(20), keys={}, link=lambda i: f"/item/{i}", shown=_shown)
    assert timeline.mode == "items" and [lane.worker for lane in timeline.lanes] == ["w1@host", "w2@host"]
    first = timeline.lanes[0].svg
    assert re.findall(r'<a href="/item/(\d)"><rect class="(k-\w)"', first) == [
        ("0", "k-s"),
        ("1", "k-f"),
        ("2", "k-s"),
    ]
    rows = [float(y) for y in re.findall(r' y="([\d.]+)"', first)]
    assert rows == [0, 12, 0], "overlapping attempts get rows of their own; later ones reuse a free row"
    assert "at most 2 at once" in timeline.lanes[0].note and "1 retried" in timeline.lanes[1].note


def test_text_inside_a_timeline_is_redacted_and_escaped() -> None:
    log = SpanLog([_span(0, 0, 0, 10)], {0: "w"}, {})
    key = f'<script>alert(1)</script> {SECRET} "quoted"'
    timeline = build_timeline(log, _window(10), keys={0: key}, link=lambda i: '/x?a=1&b="2"', shown=_shown)
    svg = str(timeline.lanes[0].svg)
    assert "<script>" not in svg and SECRET not in svg and "[REDACTED]" in svg
    assert "&lt;script&gt;" in svg and 'href="/x?a=1&amp;b=&#34;2&#34;"' in svg


def test_beyond_the_item_limit_lanes_show_attempts_running_per_bin() -> None:
    spans = [
        _span(i, i % 2, (i // 2) * 0.2, (i // 2) * 0.2 + 2, "r" if i % 50 == 0 else "s") for i in range(1000)
    ]
    log = SpanLog(spans, {0: "a", 1: "b"}, {})
    timeline = build_timeline(log, _window(102), keys={}, link=str, shown=_shown)
    assert timeline.mode == "bins" and len(spans) > ITEM_LIMIT
    svg = str(timeline.lanes[0].svg)
    assert "<rect" not in svg and "<a " not in svg, "no element per attempt"
    assert svg.count('<path class="k-s"') == 1 and svg.count('<path class="k-r"') == 2, "bars and marks"
    # 500 attempts of 2 s each, one started every 0.2 s: about 10 run at once in the middle.
    assert "at most 10.0 running at once" in timeline.lanes[0].note
    assert timeline.bin_s == pytest.approx(102 / BINS)


def test_binned_lanes_share_one_scale_so_a_busier_worker_draws_taller() -> None:
    spans = [_span(i, 0, 0, 100) for i in range(2)] + [_span(2 + i, 1, 0, 100) for i in range(500)]
    log = SpanLog(spans, {0: "quiet", 1: "busy"}, {})
    timeline = build_timeline(log, _window(100), keys={}, link=str, shown=_shown)
    busy, quiet = (max(float(h) for h in re.findall(r"v([\d.]+)h", str(lane.svg))) for lane in timeline.lanes)
    assert [lane.worker for lane in timeline.lanes] == ["busy", "quiet"], "lanes in order of their names"
    assert busy == pytest.approx(40.0) and quiet == pytest.approx(40.0 * 2 / 500)


def test_attempts_without_a_worker_sit_on_the_last_lane() -> None:
    log = SpanLog([_span(0, -1, 3, 3, "c"), _span(1, 0, 0, 2)], {0: "w"}, {})
    timeline = build_timeline(log, _window(10), keys={}, link=str, shown=_shown)
    assert [lane.worker for lane in timeline.lanes] == ["w", ""]
    assert 'class="k-c"' in timeline.lanes[1].svg


# Worker load and records -------------------------------------------------------------------


class _PreforkLike:
    """A pool answering ``info`` as Celery's prefork pool does (what ``inspect stats`` shows)."""

    info = {
        "implementation": "celery.concurrency.prefork:TaskPool",
        "max-concurrency": 6,
        "processes": [os.getpid()],
    }


def test_a_workers_load_names_its_pool_and_adds_up_its_processes_memory() -> None:
    own = rss_bytes([os.getpid()])
    assert own is not None and own > 10 * 2**20
    load = read_load(_PreforkLike())
    assert (load.pool, load.slots, load.busy) == ("prefork", 6, 0)
    assert load.rss_bytes is not None and load.rss_bytes >= 2 * own * 0.9
    assert rss_bytes([2**22 + 17]) is None
    assert read_load(None).busy is None


def test_a_heartbeat_from_an_older_worker_reads_as_unknown_load() -> None:
    record = WorkerRecord(
        node="w@h", queues=("q",), tasks={"t": TaskInfo(fleet=True)}, slots=8, busy=3, rss_bytes=5
    )
    assert WorkerRecord.from_json(record.to_json()) == record
    old = WorkerRecord.from_json('{"node": "w@h", "queues": ["q"], "tasks": {}, "pid": 7}')
    assert (old.slots, old.busy, old.rss_bytes, old.pool, old.version) == (None, None, None, "", "")
