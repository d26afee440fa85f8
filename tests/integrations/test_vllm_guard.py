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
    from mrope.integrations.vllm import audit as _vllm_audit

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


def test_patches_of_two_classes_with_the_same_method_name_keep_their_own_originals() -> None:
    """The records are keyed by (owner's qualified name, attribute): V1's ``InputBatch.add_request`` and
    V2's ``DefaultModelState.add_request`` each find their own original, and restoring puts both back."""

    class InputBatch:
        def add_request(self) -> str:
            return "batch"

    class DefaultModelState:
        def add_request(self) -> str:
            return "state"

    def batch_add(self) -> str:
        return "mrope " + patches.original(batch_add)(self)

    def state_add(self) -> str:
        return "mrope " + patches.original(state_add)(self)

    originals = (vars(InputBatch)["add_request"], vars(DefaultModelState)["add_request"])
    patches = plugin._Patches()
    patches.apply(InputBatch, "add_request", batch_add)
    patches.apply(DefaultModelState, "add_request", state_add)
    assert (InputBatch().add_request(), DefaultModelState().add_request()) == ("mrope batch", "mrope state")
    assert InputBatch.add_request.__name__ == "add_request"
    with pytest.raises(mrope.MRopeError, match="add_request twice"):
        patches.apply(InputBatch, "add_request", batch_add)
    patches.restore()
    assert (vars(InputBatch)["add_request"], vars(DefaultModelState)["add_request"]) == originals
    assert (InputBatch().add_request(), DefaultModelState().add_request()) == ("batch", "state")
