"""A resumed training run reuses the vocabulary its checkpoint was trained with."""
from __future__ import annotations

from transformers import PreTrainedTokenizerFast

from lab.training.bert import train_tokenizer
from lab.training.loop import run_tokenizer


def test_second_call_loads_the_saved_tokenizer_instead_of_retraining(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("the bank of the river flooded .\nshe paid the money into the bank .\n" * 20)
    calls = []

    def train():
        calls.append(1)
        return train_tokenizer(text, vocab_size=120, max_len=32)

    first = run_tokenizer(tmp_path / "run", train, PreTrainedTokenizerFast)
    second = run_tokenizer(tmp_path / "run", train, PreTrainedTokenizerFast)
    assert calls == [1]
    assert second.get_vocab() == first.get_vocab()
    assert second.mask_token == first.mask_token == "[MASK]"


def test_elmo_run_keeps_its_softmax_vocabulary(tmp_path):
    from lab.training.elmo import run_vocab

    first = run_vocab(tmp_path, lambda: ["<S>", "</S>", "<UNK>", "the", "--", "."])
    again = run_vocab(tmp_path, lambda: ["<S>", "</S>", "<UNK>", "--", "the"])
    assert again == first == ["<S>", "</S>", "<UNK>", "the", "--", "."]
