"""Text someone else chose (a run's name, an item key, an error), made safe to show.

A terminal obeys escape sequences, and both terminals and browsers reorder text around
Unicode direction controls: a run named ``invoice\\u202egpj.exe`` shows as ``invoiceexe.jpg``.
``visible`` writes every such character as its ``\\uXXXX`` escape, so what is shown is what
is there. Line breaks and tabs stay (tracebacks need them).
"""

from __future__ import annotations

import re

__all__ = ["visible"]

# C0 controls but tab and line feed, DEL and C1 controls; the Arabic letter mark; zero-width
# and direction marks; line and paragraph separators; embeddings, overrides and isolates;
# invisible operators; the byte-order mark; interlinear annotation controls.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb]"
)


def _escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def visible(text: str) -> str:
    """``text`` with control and direction characters written as ``\\uXXXX`` escapes."""
    return _HIDDEN.sub(_escape, text)
