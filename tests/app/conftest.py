"""App tests run the real pages against a fake engine (fast) unless marked slow."""
from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st

from app import compute
from tests.app.fake_engine import FakeEngine

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "app" / "pages"


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(compute, "ENGINE_FACTORY", FakeEngine)
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()
    st.cache_data.clear()
