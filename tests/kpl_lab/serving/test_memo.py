"""The bounded memory of the gateway's hot path."""

from __future__ import annotations

from kpl_lab.serving.memo import Memo


def test_a_memo_keeps_what_it_is_given_and_starts_over_once_full():
    memo: Memo[str, int] = Memo(2)
    assert memo.remember("a", 1) == 1 and memo.remember("b", 2) == 2
    assert memo == {"a": 1, "b": 2} and memo.get("a") == 1
    memo.remember("c", 3)  # full: what it held is forgotten
    assert memo == {"c": 3}
