"""Page scaffolding shared by every page: the error guard, model preparation, common messages."""
from __future__ import annotations

from typing import Callable

import streamlit as st

from app import compute, state
from engine.families.base import EngineError
from engine.text import TextError


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def show_error(exc: Exception) -> None:
    if isinstance(exc, (EngineError, TextError)):
        st.error(one_line(exc))
    else:
        st.error(f"Something went wrong ({type(exc).__name__}): {one_line(exc)}")


def shared_sidebar() -> None:
    """Called by the entrypoint before the page runs; pages then reuse its Inputs."""
    st.session_state["_via_navigation"] = True
    try:
        st.session_state["_inputs"] = state.sidebar()
    except Exception as exc:  # noqa: BLE001
        st.session_state["_inputs"] = None
        show_error(exc)


def run_page(render: Callable[[state.Inputs], None]) -> None:
    """Sidebar (unless the entrypoint drew it), then the page body; any error becomes one line
    on the page, never a traceback. A page file also runs on its own (tests)."""
    try:
        if st.session_state.get("_via_navigation"):
            inputs = st.session_state.get("_inputs")
            if inputs is None:
                return
        else:
            inputs = state.sidebar()
        render(inputs)
    except Exception as exc:  # noqa: BLE001 - the page must show one line, whatever failed
        show_error(exc)
    finally:
        state.write_url()


def ready_models(inputs: state.Inputs, families: tuple[str, ...] = state.SHOWN_FAMILIES,
                 ) -> list[tuple[str, str]]:
    """Load and run the chosen models; a model that fails is reported in one line and skipped."""
    if not inputs.sentences:
        st.info("Type some sentences in the sidebar (one per line), or pick a preset.")
        return []
    ok = []
    for family, model_id in inputs.models:
        if family not in families:
            continue
        try:
            compute.prepare([model_id], inputs.sentences)
            ok.append((family, model_id))
        except Exception as exc:  # noqa: BLE001 - one model failing must not hide the others
            st.error(f"{model_id}: {one_line(exc)}")
    if not ok and not any(f in families for f, _ in inputs.models):
        names = " or ".join(state.FAMILY_NAMES[f] for f in families)
        if any(compute.available_models(f) for f in families):
            article = "an" if names[0] in "AEIOU" else "a"
            st.info(f"Choose {article} {names} model in the sidebar.")
        else:
            st.info(f"No {names} model is installed here (see `ctxlens models`).")
    return ok


def missing_target_note(target: str, missing: tuple[int, ...], n: int) -> bool:
    """Say which sentences lack the target word; False when none has it."""
    if not missing:
        return True
    if len(missing) == n:
        st.error(f"The target word '{target}' is in none of the sentences (words are matched "
                 "whole, ignoring case).")
        return False
    where = ", ".join(str(i + 1) for i in missing)
    plural = "s" if len(missing) > 1 else ""
    st.warning(f"The target word '{target}' is missing from sentence{plural} {where} "
               f"(of {n}); {'they are' if plural else 'it is'} left out.")
    return True
