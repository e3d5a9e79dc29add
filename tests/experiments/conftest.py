"""Shared settings: the main variant's connector is the toolkit's once `toolkit.vllm` exports it."""

from __future__ import annotations

import importlib

import pytest


def main_connector() -> str:
    try:
        module = importlib.import_module("toolkit.vllm")
    except Exception:
        return "simplecpu"
    return "toolkit" if hasattr(module, "HybridOffloadConnector") else "simplecpu"


@pytest.fixture(scope="session")
def connector() -> str:
    return main_connector()
