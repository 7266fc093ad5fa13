"""Published values the benchmarks are plotted against (shared/reference-numbers.md).

Ethayarajh 2019 values are read from the author's per-layer statistics; where the reference
gives a range over layers it is kept as (first layer, last layer, low, high).
"""
from __future__ import annotations

# quantity -> model -> list of (layer_from, layer_to, low, high); n_layers per model below
ETHAYARAJH_2019: dict[str, dict[str, list[tuple[int, int, float, float]]]] = {
    "anisotropy": {
        "ELMo": [(0, 0, 0.008, 0.008), (1, 1, 0.157, 0.157), (2, 2, 0.136, 0.136)],
        "BERT-base": [(11, 11, 0.675, 0.675), (12, 12, 0.477, 0.477)],
        "GPT-2": [(1, 10, 0.57, 0.67), (11, 11, 0.758, 0.758), (12, 12, 0.978, 0.978)],
    },
    "self_similarity_adjusted": {
        "ELMo": [(0, 0, 0.99, 0.99), (1, 1, 0.59, 0.59), (2, 2, 0.51, 0.51)],
        "BERT-base": [(0, 0, 0.85, 0.85), (11, 11, 0.16, 0.16), (12, 12, 0.28, 0.28)],
        "GPT-2": [(0, 5, 0.28, 0.31), (11, 11, 0.13, 0.13), (12, 12, 0.007, 0.007)],
    },
    "intra_sentence_adjusted": {
        "ELMo": [(0, 0, 0.31, 0.31), (1, 1, 0.43, 0.43), (2, 2, 0.49, 0.49)],
        "BERT-base": [(1, 3, 0.33, 0.35), (11, 11, 0.20, 0.20)],
        "GPT-2": [(2, 12, -0.07, 0.04)],
    },
}
PUBLISHED_LAYERS = {"ELMo": 2, "BERT-base": 12, "GPT-2": 12}
PUBLISHED_FAMILY = {"ELMo": "elmo", "BERT-base": "bert", "GPT-2": "gpt"}

# Peters et al. 2018 Table 6 (PTB POS, linear probe): layer -> accuracy
ELMO_POS = {1: 97.3, 2: 96.8}
# Peters et al. 2018 Table 5 (SemCor WSD, nearest sense centroid, F1); first-sense baseline
ELMO_WSD = {1: 67.4, 2: 69.0}
WSD_FIRST_SENSE = 65.9
# Coenen et al. 2019: BERT-base nearest centroid F1; Pilehvar & Camacho-Collados 2019 WiC
BERT_WSD = 71.1
WIC = {"random": 50.0, "ELMo": 57.7, "BERT-large": 65.5}
