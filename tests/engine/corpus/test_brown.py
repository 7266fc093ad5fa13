from engine.corpus.brown import (Document, Sentence, detokenize, parse_tagged, split_heldout)


def test_parse_tagged_keeps_slashes_inside_words():
    s = parse_tagged("\tHe/pps ate/vbd 1/2/cd pie/nn ./.")
    assert s.tokens == ("He", "ate", "1/2", "pie", ".")
    assert s.tags == ("pps", "vbd", "cd", "nn", ".")


def test_detokenize_turns_brown_quotes_into_typed_text():
    text = detokenize(("He", "said", "``", "no", "evidence", "''", ",", "then", "left", "."))
    assert text == 'He said "no evidence", then left.'


def test_heldout_split_is_five_percent_and_deterministic():
    docs = [Document(f"c{chr(97 + i % 15)}{i:02d}", "a", (Sentence(("x",), ("nn",)),))
            for i in range(100)]
    train_a, held_a = split_heldout(docs, seed=3)
    train_b, held_b = split_heldout(list(reversed(docs)), seed=3)
    assert len(held_a) == 5 and len(train_a) == 95
    assert sorted(d.doc for d in held_a) == sorted(d.doc for d in held_b)
    assert {d.doc for d in held_a}.isdisjoint(d.doc for d in train_a)
    assert {d.doc for d in held_a} != {d.doc for d in split_heldout(docs, seed=4)[1]}
