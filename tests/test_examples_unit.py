"""The examples' own pieces that need no cluster: splitting a diff, merging review findings."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from pr_review import merge_review, split_diff

DIFF = """diff --git a/app/a.py b/app/a.py
index 1..2 100644
--- a/app/a.py
+++ b/app/a.py
@@ -1 +1 @@
-x = 1
+x = eval(y)
diff --git a/docs/b.md b/docs/b.md
new file mode 100644
--- /dev/null
+++ b/docs/b.md
@@ -0,0 +1 @@
+hello
"""


def test_a_diff_splits_into_one_whole_diff_per_file() -> None:
    parts = split_diff(DIFF)
    assert list(parts) == ["app/a.py", "docs/b.md"]
    assert parts["app/a.py"].endswith("+x = eval(y)\n") and parts["docs/b.md"].startswith(
        "diff --git a/docs/b.md"
    )
    assert "".join(parts.values()) == DIFF


def test_findings_merge_once_per_file_line_and_rule_most_severe_first() -> None:
    low = {"file": "a.py", "line": 3, "severity": "low", "rule": "print", "message": "a print"}
    high = {"file": "a.py", "line": 1, "severity": "high", "rule": "eval-exec", "message": "eval"}
    again = {**high, "message": "eval, said differently by another agent"}
    merged = merge_review([{"findings": [low, high]}, {"findings": [again]}])
    assert merged["findings"] == [high, low]
    assert merged["duplicates_removed"] == 1
