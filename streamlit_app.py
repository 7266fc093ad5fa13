"""ctxlens explorer: navigation only; each page lives in app/pages/."""
from pathlib import Path

import streamlit as st

from app import state, ui

PAGES = Path(__file__).resolve().parent / "app" / "pages"

st.set_page_config(page_title="ctxlens", page_icon="🔎", layout="wide")

CLUSTERS = st.Page(PAGES / "clusters.py", title="Polysemy clusters", url_path="polysemy",
                   default=True)
pages = [
    CLUSTERS,
    st.Page(PAGES / "grid.py", title="Layers side by side", url_path="grid"),
    st.Page(PAGES / "layers.py", title="Compare layers", url_path="layers"),
    st.Page(PAGES / "elmo_weights.py", title="ELMo layer weights", url_path="elmo"),
    st.Page(PAGES / "attention.py", title="Attention", url_path="attention"),
    st.Page(PAGES / "predictions.py", title="Predictions", url_path="predictions"),
    st.Page(PAGES / "generation.py", title="Generation", url_path="generation"),
    st.Page(PAGES / "components.py", title="What each part does", url_path="components"),
    st.Page(PAGES / "corpus.py", title="Corpus", url_path="corpus"),
]
if (PAGES / "benchmarks.py").exists():  # owned by the benchmark work
    pages.append(st.Page(PAGES / "benchmarks.py", title="Benchmarks", url_path="benchmarks"))
# Streamlit serves the default page at `/` only, so `/clusters` (how the other pages' addresses
# read) would say "Page not found": a hidden alias sends it to `/` with the link's settings.
ALIAS = st.Page(lambda: None, title="Polysemy clusters", url_path="clusters", visibility="hidden")
pages.append(ALIAS)

page = st.navigation(pages)
if page.url_path == ALIAS.url_path:
    st.switch_page(CLUSTERS, query_params=st.query_params.to_dict())
# The sidebar lives here, in the entrypoint, so its widgets keep their values across pages
# (widgets created inside a page script are reset when the user switches pages).
ui.shared_sidebar()
page.run()
state.settings_button()  # a page without ui.run_page (Benchmarks) gets the sidebar's file too
