"""The mock model's rules: sentiment, code review, tool-call directives, token accounting."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentfleet.errors import MockRequestInvalid
from agentfleet.mock_llm.directives import parse_directives
from agentfleet.mock_llm.model import (
    CACHE_TTL_S,
    MockFailure,
    MockModel,
    MockReply,
    tokens_of_chars,
)
from agentfleet.mock_llm.review import find_issues
from agentfleet.mock_llm.sentiment import score_sentiment
from agentfleet.tasks.llm_tasks import review_prompt

TOOLS = [
    {"name": "search", "input_schema": {"type": "object", "properties": {}}},
    {
        "name": "fetch",
        "input_schema": {
            "type": "object",
            "properties": {"url": {"type": "string"}, "mode": {"enum": ["fast", "full"]}},
            "required": ["url", "mode"],
        },
    },
    {"name": "sum", "input_schema": {"type": "object", "properties": {}}},
]


def request(*messages: Any, max_tokens: int = 512, **extra: Any) -> dict[str, Any]:
    turns = [{"role": "user", "content": m} if isinstance(m, str) else m for m in messages]
    return {"model": "claude-haiku-4-5", "max_tokens": max_tokens, "messages": turns, **extra}


def reply(model: MockModel, body: dict[str, Any]) -> MockReply:
    answer = model.respond(body)
    assert isinstance(answer, MockReply)
    return answer


def text_of(answer: MockReply) -> str:
    return "".join(b["text"] for b in answer.content if b["type"] == "text")


def tool_uses(answer: MockReply) -> list[dict[str, Any]]:
    return [b for b in answer.content if b["type"] == "tool_use"]


def results_for(answer: MockReply, content: str = "done") -> list[dict[str, Any]]:
    """The assistant turn and the user turn that answers all of its tool calls."""
    return [
        {"role": "assistant", "content": answer.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": u["id"], "content": f"{u['name']} {content}"}
                for u in tool_uses(answer)
            ],
        },
    ]


# Sentiment ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Fantastic blender, crushes ice in seconds.", "positive"),
        ("Sturdy and comfortable, would recommend.", "positive"),
        ("No complaints, it does the job.", "positive"),
        ("Not bad at all for the money.", "positive"),
        ("The zipper broke the first week. Useless.", "negative"),
        ("Arrived late and the box was damaged.", "negative"),
        ("I don't love it.", "negative"),
        ("A complete waste of money.", "negative"),
        ("The package came on Tuesday.", "neutral"),
        ("Nothing special, as expected.", "neutral"),
        ("Great screen but the battery died within a month.", "mixed"),
        ("Comfortable seat, noisy wheels, slow assembly, nice colour.", "mixed"),
    ],
)
def test_sentiment_labels(text: str, label: str) -> None:
    assert score_sentiment(text).label == label


def test_sentiment_reads_only_the_quoted_text_and_answers_in_the_prompts_case() -> None:
    model = MockModel()
    prompt = 'Label as Positive, Negative or Neutral. Text: "It\'s flimsy and I hate it."'
    assert text_of(reply(model, request(prompt))) == "Negative"


def test_sentiment_falls_back_when_the_prompt_does_not_offer_mixed() -> None:
    model = MockModel()
    prompt = "POSITIVE, NEGATIVE or NEUTRAL? Text: 'Excellent lens, but the strap is flimsy.'"
    assert text_of(reply(model, request(prompt))) == "POSITIVE"


# Code review -------------------------------------------------------------------------------

DIFF = """\
diff --git a/svc/api.py b/svc/api.py
index 3f2a..9c1d 100644
--- a/svc/api.py
+++ b/svc/api.py
@@ -1,4 +1,13 @@
 import subprocess
-import json
+import pickle
+import requests
+
+API_KEY = "k-41f9a8c2d7e6"
+def handle(req, db):
+    data = pickle.loads(req.body)
+    db.execute("SELECT * FROM orders WHERE id = %s" % req.args["id"])
+    result = eval(req.args["expr"])
+    subprocess.run(req.args["cmd"], shell=True)
+    requests.get(req.args["url"], verify=False)
 def ok():
     return 1
@@ -20,3 +29,6 @@ def tail():
     try:
         work()
-    except ValueError:
+    except:
+        # eval( in a comment is not code
+        pass
"""


def test_review_flags_each_rule_at_its_new_line_number() -> None:
    found = {(f.rule, f.line) for f in find_issues(DIFF)}
    assert found == {
        ("hardcoded-secret", 5),
        ("pickle-loads", 7),
        ("sql-string-format", 8),
        ("eval-exec", 9),
        ("shell-true", 10),
        ("tls-verify-disabled", 11),
        ("bare-except", 31),
    }
    assert {f.file for f in find_issues(DIFF)} == {"svc/api.py"}


def test_review_never_repeats_the_secret() -> None:
    (secret,) = [f for f in find_issues(DIFF) if f.rule == "hardcoded-secret"]
    assert secret.severity == "critical"
    assert "k-41f9a8c2d7e6" not in secret.message


def test_review_ignores_removed_and_context_lines() -> None:
    diff = (
        "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,2 @@\n eval(context_line)\n-exec(removed_line)\n+print('safe')\n"
    )
    assert find_issues(diff) == []


@pytest.mark.parametrize(
    "line",
    [
        'cursor.execute(f"DELETE FROM users WHERE id = {uid}")',
        'q = "SELECT name FROM t WHERE a = \'" + a + "\'"',
        'q = "UPDATE t SET a = {}".format(a)',
    ],
)
def test_review_flags_sql_built_from_strings(line: str) -> None:
    diff = f"--- a/q.py\n+++ b/q.py\n@@ -0,0 +1 @@\n+{line}\n"
    assert [f.rule for f in find_issues(diff)] == ["sql-string-format"]


def test_review_accepts_parameterised_sql_and_environment_secrets() -> None:
    diff = (
        "--- a/q.py\n+++ b/q.py\n@@ -0,0 +1,3 @@\n"
        '+cursor.execute("SELECT * FROM t WHERE id = %s", (uid,))\n'
        '+password = os.environ["DB_PASSWORD"]\n'
        "+value = ast.literal_eval(text)\n"
    )
    assert find_issues(diff) == []


def test_model_answers_a_diff_with_json_findings() -> None:
    answer = reply(MockModel(), request("Review this diff:\n" + DIFF))
    findings = json.loads(text_of(answer))["findings"]
    assert len(findings) == 7
    assert set(findings[0]) == {"file", "line", "severity", "rule", "message"}


# What ``git diff`` prints for files the review task is given but that have no hunk.
HUNKLESS = {
    "binary": (
        "diff --git a/docs/img/run.png b/docs/img/run.png\nindex 48309e0..bde848a 100644\n"
        "Binary files a/docs/img/run.png and b/docs/img/run.png differ\n"
    ),
    "rename": (
        "diff --git a/agentfleet/tasks/autoscale.py b/agentfleet/transport/autoscale.py\n"
        "similarity index 100%\nrename from agentfleet/tasks/autoscale.py\n"
        "rename to agentfleet/transport/autoscale.py\n"
    ),
    "mode": "diff --git a/bin/run b/bin/run\nold mode 100644\nnew mode 100755\n",
}


@pytest.mark.parametrize("kind", sorted(HUNKLESS))
def test_the_review_prompt_of_a_file_without_hunks_is_answered_with_json(kind: str) -> None:
    answer = reply(MockModel(), request(review_prompt(HUNKLESS[kind])))
    assert json.loads(text_of(answer)) == {"findings": []}


def test_the_review_prompt_is_answered_with_the_findings_as_json() -> None:
    findings = json.loads(text_of(reply(MockModel(), request(review_prompt(DIFF)))))["findings"]
    assert {(f["rule"], f["line"]) for f in findings} == {(f.rule, f.line) for f in find_issues(DIFF)}


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_auth.py",
        "svc/tests/helpers.py",
        "test_login.py",
        "pkg/login_test.go",
        "conftest.py",
        "tests/fixtures/keys.json",
        "docs/agents.md",
        "README.md",
    ],
)
def test_findings_in_tests_and_docs_are_at_most_low(path: str) -> None:
    diff = DIFF.replace("svc/api.py", path)
    found = find_issues(diff)
    assert len(found) == 7 and {f.severity for f in found} == {"low"}


@pytest.mark.parametrize(
    "path", ["svc/api.py", "app/contests.py", "latest/testing_tools.py", "src/attest.py"]
)
def test_findings_in_code_that_ships_keep_their_severity(path: str) -> None:
    found = {f.rule: f.severity for f in find_issues(DIFF.replace("svc/api.py", path))}
    assert found["hardcoded-secret"] == "critical" and found["eval-exec"] == "high"


# Tool-call directives ------------------------------------------------------------------------


def test_directives_parse_and_leave_prose_alone() -> None:
    found = parse_directives('CALL fetch {"url": "u"}\nUSE CAUTION\nLONG 9\nSLEEP 0.5')
    assert [(c.name, c.input) for c in found.calls] == [("fetch", {"url": "u"})]
    assert found.long_tokens == 9
    assert found.sleep_s == 0.5
    assert found.content == "USE CAUTION"


def test_bad_call_input_is_a_bad_request() -> None:
    with pytest.raises(MockRequestInvalid):
        parse_directives("CALL fetch {not json}")


def test_call_directives_make_one_block_each_and_then_a_summary() -> None:
    model = MockModel()
    first_turn = 'CALL search {"q": "a"}\nCALL fetch {"url": "b", "mode": "full"}'
    first = reply(model, request(first_turn, tools=TOOLS))
    uses = tool_uses(first)
    assert first.stop_reason == "tool_use"
    assert [(u["name"], u["input"]) for u in uses] == [
        ("search", {"q": "a"}),
        ("fetch", {"url": "b", "mode": "full"}),
    ]

    final = reply(model, request(first_turn, *results_for(first), tools=TOOLS))
    assert final.stop_reason == "end_turn"
    assert text_of(final) == "Summary of 2 tool result(s). search: search done; fetch: fetch done"


def test_use_all_tools_builds_inputs_from_schemas() -> None:
    answer = reply(MockModel(), request("USE ALL TOOLS\nhttps://example.test", tools=TOOLS))
    uses = tool_uses(answer)
    assert [u["name"] for u in uses] == ["search", "fetch", "sum"]
    assert uses[1]["input"] == {"url": "https://example.test", "mode": "fast"}


def test_chain_calls_one_tool_per_turn_then_answers() -> None:
    model = MockModel()
    turns: list[Any] = ["CHAIN search, fetch"]
    names = []
    for _ in range(2):
        answer = reply(model, request(*turns, tools=TOOLS))
        names += [u["name"] for u in tool_uses(answer)]
        turns += results_for(answer)
    final = reply(model, request(*turns, tools=TOOLS))
    assert names == ["search", "fetch"]
    assert final.stop_reason == "end_turn"


def test_loop_repeats_the_same_call_forever() -> None:
    model = MockModel()
    turns: list[Any] = ['LOOP search {"q": "again"}']
    calls = []
    for _ in range(6):
        answer = reply(model, request(*turns, tools=TOOLS))
        assert answer.stop_reason == "tool_use"
        calls += [(u["name"], u["input"]) for u in tool_uses(answer)]
        turns += results_for(answer)
    assert calls == [("search", {"q": "again"})] * 6


def test_an_unoffered_tool_is_a_bad_request() -> None:
    with pytest.raises(MockRequestInvalid, match="unknown_tool"):
        MockModel().respond(request("CALL unknown_tool", tools=TOOLS))


def test_tool_use_ids_depend_on_the_seed_only() -> None:
    body = request("USE TOOLS search, sum", tools=TOOLS)
    ids = [[u["id"] for u in tool_uses(reply(MockModel(seed=s), body))] for s in (1, 1, 2)]
    assert ids[0] == ids[1]
    assert ids[0] != ids[2]


def test_fail_directive_is_a_failure_with_its_wait() -> None:
    assert MockModel().respond(request("FAIL 429 3")) == MockFailure(
        429, "failure requested by the prompt (FAIL 429)", 3.0
    )


# Tokens --------------------------------------------------------------------------------------


def test_token_estimate_is_four_characters_a_token() -> None:
    assert [tokens_of_chars(n) for n in (0, 1, 4, 5, 400)] == [0, 1, 1, 2, 100]


def test_long_output_is_cut_at_max_tokens() -> None:
    full = reply(MockModel(), request("LONG 300"))
    cut = reply(MockModel(), request("LONG 300", max_tokens=40))
    assert (full.stop_reason, full.usage["output_tokens"]) == ("end_turn", 300)
    assert (cut.stop_reason, cut.usage["output_tokens"]) == ("max_tokens", 40)


def test_tool_calls_that_do_not_fit_max_tokens_are_dropped() -> None:
    answer = reply(MockModel(), request("USE TOOLS search, fetch", tools=TOOLS, max_tokens=8))
    assert answer.stop_reason == "max_tokens"
    assert len(tool_uses(answer)) < 2


def test_stop_sequences_end_the_text() -> None:
    answer = reply(MockModel(), request("SAY alpha STOP beta", stop_sequences=["STOP"]))
    assert (text_of(answer), answer.stop_reason, answer.stop_sequence) == (
        "alpha ",
        "stop_sequence",
        "STOP",
    )


def test_input_tokens_count_system_messages_and_tools() -> None:
    body = request("x" * 40, system="y" * 40)
    assert MockModel().count_input_tokens(body) == 20
    with_tools = MockModel().count_input_tokens({**body, "tools": TOOLS})
    assert with_tools > 20


def test_a_cached_prefix_expires_after_its_ttl() -> None:
    now = [0.0]
    model = MockModel(clock=lambda: now[0])
    system = [{"type": "text", "text": "z" * 400, "cache_control": {"type": "ephemeral"}}]
    body = request("hello", system=system)

    usages = []
    for at in (0.0, 200.0, 200.0 + CACHE_TTL_S + 1):
        now[0] = at
        usages.append(reply(model, body).usage)

    assert [u["cache_creation_input_tokens"] for u in usages] == [100, 0, 100]
    assert [u["cache_read_input_tokens"] for u in usages] == [0, 100, 0]
