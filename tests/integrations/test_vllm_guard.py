"""The vLLM plugin's guards, where vLLM is absent or its code is not an audited release's: ``enable``
refuses with a clear error naming what differs, the entry point leaves vLLM alone and never raises.
(Inside vLLM: tests/integrations/vllm.)"""

from __future__ import annotations

import logging
import sys
import types

import pytest

import mrope
from mrope.integrations import vllm as plugin


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path) -> types.ModuleType:
    """A stand-in ``vllm`` module with none of the audited code (the digest cache in a temporary
    folder)."""
    module = types.ModuleType("vllm")
    module.__version__ = "0.31.0"
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("MROPE_CACHE_DIR", str(tmp_path))
    return module


def test_enable_refuses_unaudited_code(fake_vllm: types.ModuleType) -> None:
    message = (
        r"vLLM 0\.31\.0: the code mrope's integration patches differs from every audited release "
        r"\(0\.32\.0, 0\.33\.0\): vllm\.v1\.worker\.gpu_model_runner:GPUModelRunner\._init_mrope_positions, "
    )
    with pytest.raises(mrope.MRopeError, match=message):
        plugin.enable()
    assert plugin.is_enabled() is None


def test_a_relabelled_vllm_with_audited_code_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The version string does not decide: audited digests under another version are accepted."""
    from mrope.integrations import _vllm_audit

    audited = dict(_vllm_audit.AUDITED["0.33.0"])
    monkeypatch.setattr(plugin, "installed_digests", lambda targets: {t: audited[t] for t in targets})
    assert plugin.audited_release("0.33.0+cu130.custom") == "0.33.0"
    assert plugin.audited_release("9.9.9") in _vllm_audit.AUDITED
    audited[_vllm_audit.RUNNER_TARGETS[0]] = "0" * 64  # one patched method changed
    plugin.audited_release.cache_clear()
    with pytest.raises(
        mrope.MRopeError, match=r"9\.9\.8: .*GPUModelRunner\._init_mrope_positions; vLLM's own"
    ):
        plugin.audited_release("9.9.8")
    plugin.audited_release.cache_clear()


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
    assert "vLLM 0.31.0: the code mrope's integration patches differs" in caplog.text


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
