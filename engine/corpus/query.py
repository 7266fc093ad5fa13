"""Reading an index: nearest occurrences of a word in context, a word's occurrences at a layer,
and Ethayarajh's statistics over the index."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.corpus.index import REFINE, SENT, _connect, layer_table
from engine.corpus.manifest import Manifest
from engine.errors import EngineError
from engine.text import joined_forms, occurrences_of, split_words, to_word_text, word_key


@dataclass(frozen=True)
class Hit:
    sentence_id: int
    position: int
    layer: int
    word: str
    sentence: str
    cosine: float

    def as_json(self) -> dict:
        return {"sentence": self.sentence, "word": self.word, "position": self.position,
                "layer": self.layer, "cosine": round(self.cosine, 6),
                "sentence_id": self.sentence_id}


class CorpusIndex:
    """An index folder opened for reading (its manifest says what it holds)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        self.manifest = Manifest.read(self.folder)
        if not self.manifest.complete:
            raise EngineError(f"the index at {self.folder} is not finished: run ctxlens index "
                              "again with the same arguments to complete it")
        db = _connect(self.folder)
        self.sentences = db.open_table(SENT)
        self.tables = {layer: db.open_table(layer_table(layer))
                       for layer in self.manifest.layers}

    def check_layer(self, layer: int) -> None:
        if layer not in self.manifest.layers:
            raise EngineError(f"layer {layer} is not in this index (it holds layers "
                              f"{', '.join(map(str, self.manifest.layers))})")

    def table(self, layer: int):
        """The table of one layer's occurrences."""
        self.check_layer(layer)
        return self.tables[layer]

    def texts(self, ids) -> dict[int, str]:
        ids = sorted({int(i) for i in ids if 0 <= int(i) < self.manifest.n_sentences})
        if not ids:
            return {}
        # The sentences table is written whole, in sentence order, so an id is its row offset:
        # a take reads only those rows, where a filter on sentence_id scanned the whole table
        # (7 of a Brown query's 30 ms). The ids read back say whether that held.
        rows = self.sentences.take_offsets(ids).select(["sentence_id", "text"]).to_list()
        got = {int(r["sentence_id"]): r["text"] for r in rows}
        if sorted(got) != ids:
            rows = (self.sentences.search().where(f"sentence_id IN ({', '.join(map(str, ids))})")
                    .select(["sentence_id", "text"]).limit(len(ids)).to_list())
            got = {int(r["sentence_id"]): r["text"] for r in rows}
        return got

    def search(self, vector: np.ndarray, layer: int, k: int = 10,
               exact: bool = False) -> list[Hit]:
        """The k occurrences at `layer` nearest to `vector` by cosine, nearest first."""
        table = self.table(layer)
        v = np.asarray(vector, np.float32)
        if not np.isfinite(v).all() or not np.any(v):
            raise EngineError("this word's vector is all zeros, so it has no cosine neighbours")
        # Only the two columns that locate a hit: each column read costs a Brown query ~6 ms,
        # and the word is the sentence's word at that position (the index split the same text
        # with the same split_words), the layer the table's.
        q = (table.search(v).distance_type("cosine").select(["sentence_id", "position"])
             .limit(k))
        if exact or not self.manifest.ann_index.get("num_partitions"):
            q = q.bypass_vector_index()
        else:
            q = q.nprobes(int(self.manifest.ann_index["nprobes"])).refine_factor(REFINE)
        rows = q.to_list()
        text = self.texts(r["sentence_id"] for r in rows)
        words = {sid: split_words(t).words for sid, t in text.items()}
        hits = []
        for r in rows:
            sid, pos = int(r["sentence_id"]), int(r["position"])
            in_sentence = words.get(sid, ())
            hits.append(Hit(sid, pos, int(layer), in_sentence[pos] if pos < len(in_sentence)
                            else "", text.get(sid, ""), 1.0 - float(r["_distance"])))
        return hits

    def vectors(self, tbl) -> np.ndarray:
        """[rows, dim] float32 of an Arrow table's `vector` column (stored float16)."""
        return np.asarray(tbl["vector"].combine_chunks().values.to_numpy(zero_copy_only=False),
                          np.float32).reshape(tbl.num_rows, self.manifest.dim)

    def occurrences(self, word: str, layer: int, limit: int = 3000):
        """A word's occurrences at a layer (the lower-cased key): ([n, dim] float32 vectors,
        sentence ids, positions), at most `limit`, in corpus order."""
        tbl = (self.table(layer).search().where(_key_is(word))
               .select(["sentence_id", "position", "vector"]).limit(limit).to_arrow())
        tbl = tbl.sort_by([("sentence_id", "ascending"), ("position", "ascending")])
        return self.vectors(tbl), tbl["sentence_id"].to_numpy(), tbl["position"].to_numpy()

    def occurrences_at_layers(self, word: str, layers=None, limit: int = 1000):
        """The same occurrences of a word at several layers (default: every layer in the
        index): ([layers, n, dim] float32, sentence ids, positions). The occurrences are the
        first layer's `occurrences(word, layer, limit)`; each other layer's rows are read for
        those sentences and matched by (sentence, position), as a layer table's own `limit`
        may pick other rows (tables are written in the order batches finish)."""
        layers = list(self.manifest.layers if layers is None else layers)
        for layer in layers:
            self.check_layer(layer)
        vec0, sids, pos = self.occurrences(word, layers[0], limit)
        out = np.empty((len(layers), len(sids), self.manifest.dim), np.float32)
        out[0] = vec0
        if len(sids) == 0:
            return out, sids, pos
        where = (f"{_key_is(word)} AND sentence_id IN "
                 f"({', '.join(str(int(i)) for i in np.unique(sids))})")
        want = {(int(s), int(p)): i for i, (s, p) in enumerate(zip(sids, pos))}
        for k, layer in enumerate(layers[1:], 1):
            tbl = (self.table(layer).search().where(where)
                   .select(["sentence_id", "position", "vector"]).limit(None).to_arrow())
            vec = self.vectors(tbl)
            got = [want.get((int(s), int(p))) for s, p in zip(tbl["sentence_id"].to_pylist(),
                                                              tbl["position"].to_pylist())]
            rows = [j for j, i in enumerate(got) if i is not None]
            if len(rows) != len(sids):
                raise EngineError(f"layer {layer} of this index lacks some occurrences of "
                                  f"{word!r} that layer {layers[0]} holds: build it again")
            out[k, [got[j] for j in rows]] = vec[rows]
        return out, sids, pos

    def count(self, word: str, layer: int) -> int:
        return self.table(layer).count_rows(_key_is(word))

    def rows_of(self, sentence_ids, layers=None, columns=("sentence_id", "position", "layer",
                                                            "word", "vector")):
        """Every row of these sentences at these layers (default: all), one Arrow table."""
        import pyarrow as pa

        where = f"sentence_id IN ({', '.join(str(int(i)) for i in sentence_ids)})"
        parts = [self.table(layer).search().where(where).select(list(columns)).limit(None)
                 .to_arrow() for layer in (self.manifest.layers if layers is None else layers)]
        return pa.concat_tables(parts)


def _key_is(word: str) -> str:
    """The filter on a word's lower-cased key (a quote in the word doubled, as SQL wants). The
    keys hold apostrophes as the text had them, so "don't" asks for "don’t" as well: a phone
    types one, Brown has the other."""
    key = word_key(word)
    forms = sorted({key, key.replace("'", "\u2019")})
    return "key IN (" + ", ".join("'" + f.replace("'", "''") + "'" for f in forms) + ")"


def embed_word(engine, manifest: Manifest, text: str, word: str,
               occurrence: int = 1) -> tuple[np.ndarray, int]:
    """The word's vectors at the index's layers, in its sentence, with the index's model and
    pooling: ([chosen layers, dim], word position). Its `occurrence`-th appearance (from 1),
    case ignored."""
    wt = to_word_text(text)         # as the Engine reads a typed text (invisible characters out)
    at = occurrences_of(wt.words, word)
    if not at:
        inside = joined_forms(wt.words, word)
        raise EngineError(f"the word {word!r} is not in the text (words are matched whole, "
                          "ignoring case)" + (f"; {inside[0]!r} is one word here: give it as "
                                              "--word" if inside else ""))
    if not 1 <= occurrence <= len(at):
        raise EngineError(f"the word {word!r} occurs {len(at)} time(s) in the text; occurrence "
                          f"{occurrence} does not exist (count from 1)")
    pos = at[occurrence - 1]
    enc = engine.encode_words(manifest.model, [wt])[0]
    vectors = enc.word_vectors(manifest.pooling)
    # a manifest edited by hand, or a model id whose files changed since the build, would
    # otherwise end in LanceDB's own error about the vector column
    if vectors.shape[-1] != manifest.dim or max(manifest.layers) >= vectors.shape[0]:
        raise EngineError(f"{manifest.model} gives {vectors.shape[0]} layers of {vectors.shape[-1]} "
                          f"dimensions, but this index holds layers {manifest.layers[0]}-"
                          f"{manifest.layers[-1]} of {manifest.dim}: it was not built with this "
                          "model as it is now; build it again into a new folder")
    return vectors[manifest.layers][:, pos], pos


def neighbours(engine, index: CorpusIndex, text: str, word: str, layer: int, k: int = 10,
               exact: bool = False, occurrence: int = 1) -> list[Hit]:
    index.check_layer(layer)
    vecs, _ = embed_word(engine, index.manifest, text, word, occurrence)
    return index.search(vecs[index.manifest.layers.index(layer)], layer, k, exact)


def stats(index: CorpusIndex, sample: int = 2000, seed: int = 0, n_resamples: int = 1000):
    """Ethayarajh (2019) per-layer statistics over the index: a seeded sample of `sample`
    sentences (0: all) read back as word-level encodings, with bootstrap 95% intervals
    (resampling sentences; for self-similarity, the repeated words): engine.analysis.geometry,
    the same code as the app's Compare layers page."""
    from engine.analysis.geometry import layer_metrics
    from engine.result import Encoding

    m = index.manifest
    rng = np.random.default_rng(seed)
    ids = np.arange(m.n_sentences)
    if sample and sample < m.n_sentences:
        ids = np.sort(rng.choice(ids, size=sample, replace=False))
    encs = []
    for lo in range(0, len(ids), 500):
        chunk = ids[lo:lo + 500]
        tbl = index.rows_of(chunk.tolist())
        sid = tbl["sentence_id"].to_numpy()
        pos = tbl["position"].to_numpy()
        lay = tbl["layer"].to_numpy()
        vec = index.vectors(tbl)
        words = tbl["word"].to_pylist()
        layer_at = {l: i for i, l in enumerate(m.layers)}
        for s in chunk:
            rows = np.nonzero(sid == s)[0]
            if not len(rows):
                continue
            n = int(pos[rows].max()) + 1
            hs = np.zeros((len(m.layers), n, m.dim), np.float32)
            hs[[layer_at[int(l)] for l in lay[rows]], pos[rows]] = vec[rows]
            w = [""] * n
            for r in rows:
                w[pos[r]] = words[r]
            encs.append(Encoding(model_id=m.model, family=m.family, text=" ".join(w),
                                 words=tuple(w), tokens=tuple(w), token_to_word=np.arange(n),
                                 hidden_states=hs, layer_names=tuple(m.layer_names)))
    if len(encs) < 2:
        raise EngineError("the index holds too few sentences for these statistics")
    return layer_metrics(encs, pool="mean", seed=seed, n_resamples=n_resamples), len(encs)
