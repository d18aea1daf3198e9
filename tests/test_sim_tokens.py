"""The simulator's documented token counter and filler text."""

from __future__ import annotations

from hypothesis import given, strategies as st

from servewatch.sim import tokens


def test_counting_rule_examples():
    assert tokens.count_tokens("hello, world") == 5          # hell|o , worl|d
    assert tokens.count_tokens("") == 0
    assert tokens.count_tokens("   ") == 0
    assert tokens.count_tokens("a b c") == 3
    assert tokens.count_tokens("abcdefgh!") == 3
    assert tokens.count_chat_tokens(["hi", "there"]) == 1 + 2 + 2 * 4 + 3


@given(st.text(max_size=200))
def test_pieces_agree_with_the_count(text):
    assert len(tokens.pieces(text)) == tokens.count_tokens(text)


def test_filler_is_one_token_per_word_and_deterministic():
    text = tokens.filler_text(42, 0, 100)
    assert tokens.count_tokens(text) == 100
    assert text == tokens.filler_text(42, 0, 60) + tokens.filler_text(42, 60, 40)
    assert text != tokens.filler_text(43, 0, 100)


def test_piece_ids_are_stable_and_in_the_vocabulary():
    assert tokens.piece_id("hell", 2048) == tokens.piece_id("hell", 2048)
    assert all(0 <= tokens.piece_id(p, 2048) < 2048 for p in tokens.pieces("the quick brown fox"))
