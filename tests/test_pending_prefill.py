"""What admission counts as left to prefill of the prompts it has admitted (quick tier)."""

from __future__ import annotations

from gateway.pending_prefill import PendingPrefills


def test_under_shortest_first_the_prefill_goes_to_the_least_left_first() -> None:
    pending = PendingPrefills(now_s=0.0)
    pending.add(1000)
    pending.add(300)
    pending.advance(now_s=1.0, tokens_per_s=400.0, shortest_first=True)
    # 300 finish the short prompt, the other 100 go to the long one.
    assert pending.total_tokens() == 900
    assert pending.tokens_before(950, shortest_first=True) == 900
    assert pending.tokens_before(800, shortest_first=True) == 0
    assert pending.num_before(800, shortest_first=True) == 1  # the short one, done
    assert pending.num_before(800, shortest_first=False) == 2


def test_a_prompt_under_way_goes_before_a_fresh_one_a_little_shorter() -> None:
    pending = PendingPrefills(now_s=0.0)
    pending.add(1610)
    pending.advance(now_s=2.0, tokens_per_s=130.0, shortest_first=True)
    pending.add(1600)  # by length it would go first; by what is left it goes second
    assert pending.tokens_before(1600, shortest_first=True) == 1350 + 1600
    pending.advance(now_s=3.0, tokens_per_s=130.0, shortest_first=True)
    assert pending.total_tokens() == 1220 + 1600  # the one under way kept the prefill


def test_in_admission_order_the_first_admitted_is_prefilled_first() -> None:
    pending = PendingPrefills(now_s=0.0)
    first = pending.add(1000)
    pending.add(300)
    pending.advance(now_s=1.0, tokens_per_s=400.0, shortest_first=False)
    assert pending.total_tokens() == 600 + 300
    assert pending.tokens_before(300, shortest_first=False) == 900  # all of it, in vLLM's order
    pending.remove(first)
    assert pending.total_tokens() == 300 and len(pending) == 1


def test_no_rate_no_progress_and_nothing_below_zero() -> None:
    pending = PendingPrefills(now_s=0.0)
    key = pending.add(500)
    pending.advance(now_s=10.0, tokens_per_s=None, shortest_first=True)
    assert pending.total_tokens() == 500
    pending.advance(now_s=20.0, tokens_per_s=1000.0, shortest_first=True)
    assert pending.total_tokens() == 0 and len(pending) == 1  # estimated done, no first token yet
    assert pending.tokens_before(1, shortest_first=True) == 0
    pending.remove(key)
    pending.remove(key)  # a second removal is harmless
    assert len(pending) == 0
