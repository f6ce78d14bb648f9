"""A seeded generator of varied English-like text, so that no two prompts share a prefix.

The text is made of "pieces", each carrying its own leading space or newline, so
that any prefix of the pieces is well-formed text and a prompt can be cut to a
token count without cutting a word.
"""

from __future__ import annotations

import random

NOUNS = (
    "agent",
    "archive",
    "batch",
    "branch",
    "buffer",
    "cache",
    "channel",
    "cluster",
    "commit",
    "config",
    "contract",
    "dataset",
    "deadline",
    "decoder",
    "driver",
    "engine",
    "event",
    "field",
    "file",
    "filter",
    "gateway",
    "graph",
    "handler",
    "index",
    "invoice",
    "kernel",
    "ledger",
    "library",
    "loop",
    "manifest",
    "market",
    "meeting",
    "message",
    "metric",
    "model",
    "module",
    "network",
    "note",
    "order",
    "package",
    "parser",
    "patch",
    "pipeline",
    "plan",
    "policy",
    "queue",
    "record",
    "region",
    "release",
    "report",
    "request",
    "result",
    "review",
    "river",
    "route",
    "sample",
    "schema",
    "scheduler",
    "script",
    "server",
    "service",
    "session",
    "shard",
    "signal",
    "socket",
    "sprint",
    "stream",
    "summary",
    "supplier",
    "table",
    "task",
    "team",
    "template",
    "test",
    "thread",
    "ticket",
    "timer",
    "token",
    "trace",
    "user",
    "vendor",
    "version",
    "window",
    "worker",
    "workflow",
)
ADJECTIVES = (
    "active",
    "brittle",
    "careful",
    "cold",
    "complete",
    "current",
    "dense",
    "distant",
    "early",
    "empty",
    "expensive",
    "fast",
    "fragile",
    "fresh",
    "full",
    "hidden",
    "idle",
    "large",
    "late",
    "local",
    "long",
    "minor",
    "narrow",
    "noisy",
    "old",
    "open",
    "partial",
    "pending",
    "primary",
    "quiet",
    "rare",
    "recent",
    "remote",
    "robust",
    "shared",
    "short",
    "silent",
    "slow",
    "small",
    "stable",
    "stale",
    "steady",
    "strict",
    "subtle",
    "urgent",
    "valid",
    "warm",
    "weekly",
    "wide",
)
VERBS = (
    "accepts",
    "adjusts",
    "blocks",
    "builds",
    "caches",
    "checks",
    "collects",
    "compares",
    "delays",
    "drops",
    "emits",
    "exports",
    "fetches",
    "flags",
    "formats",
    "groups",
    "holds",
    "ignores",
    "imports",
    "limits",
    "loads",
    "logs",
    "matches",
    "measures",
    "merges",
    "moves",
    "parses",
    "pauses",
    "predicts",
    "publishes",
    "reads",
    "rejects",
    "renames",
    "repairs",
    "replays",
    "reports",
    "resolves",
    "retries",
    "returns",
    "routes",
    "sends",
    "shares",
    "signs",
    "skips",
    "sorts",
    "splits",
    "stores",
    "tracks",
    "updates",
    "validates",
    "writes",
)
ADVERBS = (
    "Afterwards",
    "Meanwhile",
    "Later",
    "In practice",
    "By default",
    "Occasionally",
    "At night",
    "In the morning",
    "Before the release",
    "During the review",
    "As expected",
    "Unexpectedly",
    "For now",
    "In most cases",
    "Sometimes",
    "Eventually",
)
PREPOSITIONS = (
    "into",
    "from",
    "across",
    "behind",
    "beside",
    "through",
    "under",
    "after",
    "before",
)
TOOLS = (
    "read_file",
    "search_code",
    "run_tests",
    "list_dir",
    "git_log",
    "http_get",
    "query_db",
)
QUESTIONS = (
    "Which {noun} {verb} the {adj} {noun2} first, and why?",
    "Summarise what the {noun} does with the {noun2} in two sentences.",
    "What should the {adj} {noun} do when the {noun2} is {adj2}?",
    "Explain why the {noun2} {verb} the {noun} so often.",
    "List three risks of letting the {noun} {verb2} the {adj} {noun2}.",
    "How would you test that the {noun} never {verb} a {adj} {noun2}?",
)


class TextGenerator:
    """Sentences, paragraphs and agent-style tool output from one ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def _pick(self, words: tuple[str, ...]) -> str:
        return self.rng.choice(words)

    def sentence(self) -> str:
        p = self._pick
        shape = self.rng.randrange(4)
        if shape == 0:
            where = f"{p(PREPOSITIONS)} the {p(NOUNS)}"
            s = f"The {p(ADJECTIVES)} {p(NOUNS)} {p(VERBS)} the {p(NOUNS)} {where}."
        elif shape == 1:
            s = f"{p(ADVERBS)}, every {p(NOUNS)} {p(VERBS)} a {p(ADJECTIVES)} {p(NOUNS)}."
        elif shape == 2:
            n = self.rng.randint(2, 999)
            s = (
                f"When the {p(NOUNS)} is {p(ADJECTIVES)}, the {p(NOUNS)} {p(VERBS)} "
                f"{n} {p(NOUNS)}s and {p(VERBS)} the rest."
            )
        else:
            s = f"Nobody {p(VERBS)} a {p(ADJECTIVES)} {p(NOUNS)} twice, said the {p(NOUNS)}."
        return s

    def question(self) -> str:
        p = self._pick
        return self.rng.choice(QUESTIONS).format(
            noun=p(NOUNS),
            noun2=p(NOUNS),
            adj=p(ADJECTIVES),
            adj2=p(ADJECTIVES),
            verb=p(VERBS),
            verb2=p(VERBS).removesuffix("s"),
        )

    def identifier(self) -> str:
        return f"{self._pick(NOUNS)}_{self._pick(NOUNS)}"

    def tool_line(self) -> str:
        line = self.rng.randint(1, 2000)
        return f"- src/{self.identifier()}.py:{line}: {self.sentence()}"

    def agent_section(self) -> list[str]:
        """One block of an agent transcript: notes or a tool call and its output."""
        if self.rng.random() < 0.5:
            head = f"\n\n## Notes on the {self._pick(ADJECTIVES)} {self._pick(NOUNS)}\n"
            body = " ".join(self.sentence() for _ in range(self.rng.randint(3, 8)))
        else:
            tool, arg = self._pick(TOOLS), self.identifier()
            head = f'\n\n## Tool call: {tool}("{arg}")\n'
            body = "\n".join(self.tool_line() for _ in range(self.rng.randint(3, 8)))
        return [head, *words_of(body)]


def words_of(text: str) -> list[str]:
    """Split text into pieces that each keep their leading space (so ``"".join`` restores it)."""
    pieces: list[str] = []
    for i, word in enumerate(text.split(" ")):
        pieces.append(word if i == 0 else " " + word)
    return [piece for piece in pieces if piece]
