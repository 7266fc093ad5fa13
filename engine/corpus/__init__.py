"""Corpus mode: every occurrence of every word of a corpus, embedded at chosen layers and kept
in an embedded vector database (LanceDB) for neighbour search and corpus-wide statistics."""
