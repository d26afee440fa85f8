"""The vLLM plugin's guards, where vLLM is absent or of another version: ``enable`` refuses with a
clear error, the entry point leaves vLLM alone and never raises. (Inside vLLM: tests/integrations/vllm.)"""

from __future__ import annotations

import logging
import sys
import types

import pytest

import mrope
from mrope.integrations import vllm as plugin


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in ``vllm`` module of an unsupported version."""
    module = types.ModuleType("vllm")
    module.__version__ = "0.31.0"
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_enable_refuses_an_unsupported_version(fake_vllm: types.ModuleType) -> None:
    with pytest.raises(mrope.MRopeError, match=r"vLLM 0\.31\.0 is not supported.*0\.32\.0"):
        plugin.enable()
    assert plugin.is_enabled() is None


def test_enable_refuses_an_unknown_mode() -> None:
    with pytest.raises(mrope.MRopeError, match="mode must be one of"):
        plugin.enable("fast")


@pytest.mark.parametrize("value", ["1", "check"])
def test_entry_point_warns_and_leaves_vllm_alone(
    fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    monkeypatch.setenv(plugin.ENV_VAR, value)
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        plugin.register()
    assert plugin.is_enabled() is None
    assert "vLLM 0.31.0 is not supported" in caplog.text


@pytest.mark.parametrize("value", [None, "", "0"])
def test_entry_point_is_off_by_default(
    fake_vllm: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str | None,
) -> None:
    if value is None:
        monkeypatch.delenv(plugin.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(plugin.ENV_VAR, value)
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        plugin.register()
    assert plugin.is_enabled() is None
    assert caplog.text == ""


def test_entry_point_refuses_an_unknown_mode(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(plugin.ENV_VAR, "fast")
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        plugin.register()
    assert plugin.is_enabled() is None
    assert "mode must be one of" in caplog.text
