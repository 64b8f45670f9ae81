"""Shared fixtures of the data tests."""

import pytest


@pytest.fixture
def offline_datasets(monkeypatch, tmp_path):
    """The datasets package with the Hugging Face Hub switched off (no network here).

    huggingface_hub and datasets read HF_HUB_OFFLINE / HF_DATASETS_OFFLINE once, at import, so importing them
    here first keeps every later in-process hub call of the session offline too (instead of retrying ~23 s)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return pytest.importorskip("datasets")
