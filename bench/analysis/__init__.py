"""Analyses only the benchmarks and the lab use (sense probes, the everyday cloze items,
WordNet examples): kept out of the installed package, which ships engine/ and app/."""
