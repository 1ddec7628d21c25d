"""The texts the demo classifies: product reviews, and two that make the mock model fail."""

from __future__ import annotations

QUICKSTART_TEXTS: tuple[str, ...] = (
    "The battery lasts two full days and the screen is gorgeous. Best purchase this year.",
    "Stopped charging after a week and support never answered my emails.",
    "It arrived on Tuesday in a brown box.",
    "Great sound, but the ear cushions started peeling within a month.",
    "Setup took five minutes and everything just worked. Delighted.",
    "The app crashes every time I open the settings page. Awful.",
    "Comes in three colours; I picked the grey one.",
    "Fast shipping and a sturdy build, though the manual is confusing.",
    "I love how quiet it is at night; the whole family sleeps better.",
    "Overpriced for what it does, and the plastic feels cheap.",
)

# The mock model obeys a FAIL directive on its own line: these items fail for good, so the
# demo shows what the dead-letter queue holds.
FAILING_TEXTS: tuple[str, ...] = (
    "A review the provider refuses.\nFAIL 401",
    "A request the provider rejects as malformed.\nFAIL 400",
)

EXTRA_WORDS = (
    ("brilliant", "works perfectly", "would buy again"),
    ("broken", "returned it", "disappointing"),
    ("arrived", "is blue", "weighs two kilos"),
)


def extra_text(i: int) -> str:
    """A generated review for item ``i`` beyond the quickstart ten."""
    words = EXTRA_WORDS[i % len(EXTRA_WORDS)]
    return f"Order {1000 + i}: the product {words[i % 3]}."
