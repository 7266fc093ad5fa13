"""Teacher labels for the MLM head: SmolLM2-style next-token guesses placed on the right
WordPiece, mapped onto the student's vocabulary, and packed onto the training blocks."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from lab.training.bert import installed_dir, specials_of
from lab.training.mlm_head import TeacherRows, distill_loss
from lab.training.mlm_teacher import align, vocab_map
from tests.zoo import byte_level_tokenizer

CORPUS = ["the cat sat on the mat .", "a dog ran to the park .", "the cat ran ."] * 20


@pytest.fixture(scope="module")
def toks():
    student = AutoTokenizer.from_pretrained(str(installed_dir("minilm-l6")))
    teacher = byte_level_tokenizer(CORPUS, vocab_size=300)
    return student, teacher, vocab_map(student, teacher, specials_of(student).first_regular)


def test_each_teacher_pair_spells_its_wordpiece(toks):
    student, teacher, vm = toks
    for t, s in zip(vm.spaced_teacher.tolist(), vm.spaced_student.tolist()):
        assert teacher.decode([t]).strip().lower() == student.convert_ids_to_tokens(s)
    assert len(vm.spaced_student) > 0


def test_alignment_puts_each_word_after_its_left_context(toks):
    student, teacher, vm = toks
    text = "the cat sat on the mat ."
    start = teacher.convert_tokens_to_ids("<|endoftext|>")
    t_ids, pairs, n = align(text, student, teacher, vm.student_of(True), vm.student_of(False),
                            start)
    pieces = student.convert_ids_to_tokens(student(text, add_special_tokens=False)["input_ids"])
    assert pairs, "no word was aligned"
    for j, k, spaced in pairs:
        # the teacher token after position k spells the student's piece j
        word = teacher.decode([t_ids[k + 1]])
        assert word.strip().lower() == pieces[j] and spaced == word.startswith(" ")
        assert k >= 1        # never a guess from the start token alone
    assert 0 not in [j for j, _, _ in pairs]


def test_distill_loss_mixes_word_and_teacher_targets():
    class Labels:
        ids = torch.tensor([[1, 2], [0, 3]])
        probs = torch.tensor([[0.5, 0.5], [1.0, 0.0]])

    logits = torch.log(torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.7, 0.1, 0.1, 0.1]]))
    targets = torch.tensor([1, 0])
    rows = torch.tensor([0, -1])
    got = distill_loss(logits, targets, rows, Labels, 0.5)
    word = -np.log([0.6, 0.7])
    soft = -(0.5 * np.log(0.6) + 0.5 * np.log(0.2))
    expected = ((0.5 * word[0] + 0.5 * soft) + word[1]) / 2
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_labels_land_on_the_same_positions_of_the_packed_blocks(tmp_path):
    from lab.training.bert import pad_chunks
    from lab.training.blocks import sentence_chunks

    sentence_ids = [[10, 11, 12], [20, 21], [30, 31, 32, 33], [40]]
    np.savez(tmp_path / "shard-0000.npz", sentence=np.array([0, 2, 2, 3], np.int32),
             piece=np.array([1, 0, 3, 0], np.int16), ids=np.zeros((4, 16), np.int32),
             probs=np.ones((4, 16), np.float16))
    rows = TeacherRows(tmp_path, sentence_ids)
    docs, words = [sentence_ids[:2], sentence_ids[2:]], [[3, 2], [4, 1]]
    chunks, _ = sentence_chunks(docs, words, 6, 0.0, 13)
    it = iter(rows.per_sentence)
    row_chunks, _ = sentence_chunks([[next(it) for _ in d] for d in docs], words, 6, 0.0, 13)
    blocks = pad_chunks(chunks, 8)
    placed = rows.blocks(row_chunks, 8)
    labelled = {int(blocks[i, p]) for i, p in zip(*np.nonzero(placed.numpy() >= 0))}
    assert labelled == {11, 30, 33, 40}


def test_prompt_teacher_blanks_the_picked_word_and_picks_the_same_word_again(toks):
    from engine.families.gpt.fill import FILL_BLANK
    from lab.training.mlm_teacher import pick_word, prompt_sentence

    student, teacher, vm = toks
    text = "the cat sat on the mat ."
    s = student(text, add_special_tokens=False, return_offsets_mapping=True)
    pieces = student.convert_ids_to_tokens(s["input_ids"])
    _, pairs, _ = align(text, student, teacher, vm.student_of(True), vm.student_of(False),
                        teacher.convert_tokens_to_ids("<|endoftext|>"))
    picks = {pick_word(pairs, i, 0, pieces) for i in range(40)}
    assert {pieces[j] for j, _, _ in picks} <= {"cat", "sat", "on", "the", "mat"}
    assert len(picks) > 1                                  # the seed spreads the words
    assert pick_word(pairs, 7, 0, pieces) == pick_word(pairs, 7, 0, pieces)
    j = pick_word(pairs, 7, 0, pieces)[0]
    a, b = s["offset_mapping"][j]
    prompt, at = prompt_sentence(text, a, b)
    assert prompt[at:at + len(FILL_BLANK)] == FILL_BLANK
    assert prompt.endswith("Answer:") and pieces[j] not in prompt[at - 3: at + 5]


def test_text_mode_reads_only_the_example_lines(tmp_path):
    from lab.training.mlm_teacher import text_sentences

    (tmp_path / "shard-0000.txt").write_text("key: metal device that opens a lock.\n"
                                             "I left my keys in the car.\n"
                                             "bank, riverbank: sloping land.\nThe bank was muddy.\n")
    assert text_sentences(tmp_path) == ["I left my keys in the car.", "The bank was muddy."]


@pytest.mark.slow
def test_compare_scores_the_teacher_labels_and_the_student_on_the_same_words():
    from engine.api import Engine
    from lab.training.mlm_teacher import compare

    tok = AutoTokenizer.from_pretrained(str(installed_dir("minilm-l6")), local_files_only=True)
    sentences = ["I opened the door with my key .", "She drank a cup of hot tea ."]
    pieces = [tok.convert_ids_to_tokens(tok(s, add_special_tokens=False)["input_ids"])
              for s in sentences]
    j = [pieces[0].index("key"), pieces[1].index("tea")]
    ids = np.array([tok.convert_tokens_to_ids(["key", "lock", "door", "car", "hand"]),
                    tok.convert_tokens_to_ids(["coffee", "water", "milk", "soup", "juice"])])
    labels = {"sentence": np.array([0, 1]), "piece": np.array(j), "ids": ids}
    got = compare(labels, sentences, tok)
    assert got["words"] == 2
    assert got["teacher"]["top1"]["hits"] == 1 and got["teacher"]["top5"]["hits"] == 1
    engine = Engine(cache_size=0)
    asked = {"key": "I opened the door with my [MASK] .", "tea": "She drank a cup of hot [MASK] ."}
    expected = sum(word in [c.token for c in engine.predict_masked("minilm-l6-mlm", text,
                                                                   top_k=5).candidates]
                   for word, text in asked.items())
    assert got["student"]["top5"]["hits"] == expected
