"""The Corpus page's index builds and deletes: Brown indexed for any installed model at the
layers chosen, resumed where a stopped build ended, and the app's own indexes deleted again
(nothing of either on a read-only server)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import corpus_access, ui
from app.safe import safe_md

# the folder of an index just built: the page opens it next run (set before its selectbox)
JUST_BUILT = "_corpus_just_built"


def build_offer(have_indexes: bool) -> None:
    """Build Brown for any installed model at the layers chosen: the page's main content with
    no index yet, behind a toggle under the index choice otherwise."""
    if not corpus_access.index_changes_allowed():
        if have_indexes:
            st.caption(corpus_access.READ_ONLY_NOTE)
        else:
            st.info(f"No corpus index yet. {corpus_access.READ_ONLY_NOTE}")
        return
    models = corpus_access.brown_index_models()
    if not models:
        if not have_indexes:
            st.info("No index yet, and no installed model to build one with (`ctxlens models`).")
        return
    if not have_indexes:
        st.info("No corpus index yet. Build one of the Brown corpus (57k sentences, 1.16M "
                "words) here, or with `make index` from a terminal; an interrupted build "
                "continues where it stopped.")
    # a toggle, not an expander: an expander's content runs (and would load a model) closed
    elif not st.toggle("Build a Brown index for another model or other layers",
                       key="corpus_build_more"):
        return
    with st.container(border=have_indexes), ui.guarded():    # one line, the page stays
        build_form(st.selectbox("Model", models, key="corpus_build_model"))


def build_form(model: str) -> None:
    """The layers of `model` to index, what they take on disk, and the build (which opens the
    new index when it ends)."""
    shape = corpus_access.layer_shape(model)
    n = len(shape.names)
    default, most = corpus_access.brown_default_layers(n)
    layers = st.multiselect(
        "Layers", list(range(n)), default=default,
        format_func=lambda i: f"{i}: {shape.names[i]}", key=f"corpus_build_layers-{model}",
        help=f"Every layer for a model of up to {most}; a deeper one gets "
             f"{most} evenly spaced unless you choose others.")
    if not layers:
        st.warning("Choose at least one layer to index.")
        return
    folder = corpus_access.brown_index_path(model, layers, n)
    state = corpus_access.brown_index_state(folder)
    if state == "complete":
        st.caption(f"Already built: {safe_md(folder.name)}, in the Index list above.")
        return
    size = corpus_access.brown_index_bytes(len(layers), shape.dim)
    st.caption(f"{len(layers)} of {n} layers ({shape.dim} dimensions each) into {safe_md(folder)}: "
               f"about {size / 2**30:.1f} GiB on disk. The time depends on the model; the "
               "bar shows the time left once the first sentences are in. Leaving the page "
               "or changing a setting stops the build; building again continues it."
               + (" A build of these layers stopped before the end: this continues it."
                  if state == "partial" else ""))
    free = corpus_access.free_bytes(folder)
    if size > free:
        st.warning(f"That disk has {free / 2**30:.1f} GiB free, less than the index needs: "
                   "choose fewer layers, or free some space first (a build that fills the "
                   "disk stops and keeps what it wrote).")
    verb = "Continue" if state == "partial" else "Build"
    if state == "partial" and st.button("Delete what the stopped build wrote",
                                        key="corpus_delete_partial"):
        delete_index(str(folder))
    if st.button(f"{verb} the Brown index for {model}", key="corpus_build"):
        bar = st.progress(0.0, text=f"Embedding Brown with {safe_md(model)} …")
        corpus_access.build_brown_index(model, layers, folder, ui.build_progress(
            bar, f"Embedding Brown with {model}"))
        bar.progress(1.0, text="Done")
        st.session_state[JUST_BUILT] = str(folder)     # the page opens the new index
        st.rerun()


def delete_offer(folder: str, manifest) -> None:
    """The app's own indexes (those built here) can go again: Brown at seven layers of a 135M
    model takes 9.5 GiB."""
    if not corpus_access.app_owned(folder) or not corpus_access.index_changes_allowed():
        return
    name = Path(folder).name
    with st.popover(f"Delete {name}"):
        st.caption(f"{manifest.bytes_on_disk / 2**30:.1f} GiB on disk; building it again takes "
                   "as long as the first time.")
        if st.button(f"Delete {name} now", key="corpus_delete", type="primary"):
            delete_index(folder)


def delete_index(folder: str) -> None:
    """Delete one of the app's indexes and draw the page again; a refusal is one line."""
    with ui.guarded():
        corpus_access.remove_index(folder)
        st.rerun()
