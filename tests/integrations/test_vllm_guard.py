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
from mrope.integrations.vllm import audit, models
from mrope.integrations.vllm.state import Patches


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path) -> types.ModuleType:
    """A stand-in ``vllm`` module with none of the audited code (the digest cache in a temporary
    folder)."""
    module = types.ModuleType("vllm")
    module.__version__ = "0.31.0"
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("MROPE_CACHE_DIR", str(tmp_path))
    return module


def test_enable_refuses_a_vllm_without_runners(fake_vllm: types.ModuleType) -> None:
    message = r"vLLM 0\.31\.0 has none of the model runners mrope serves \(v1, v2, v2-cpu\)"
    with pytest.raises(mrope.MRopeError, match=message):
        plugin.enable()
    assert plugin.is_enabled() is None


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """The installed vLLM's digests, as the test sets them (the verdicts' cache cleared around it)."""
    digests: dict[str, str | None] = {}
    monkeypatch.setattr(models, "installed_digests", lambda targets: {t: digests.get(t) for t in targets})
    models.runner_verdicts.cache_clear()
    yield digests
    models.runner_verdicts.cache_clear()


def test_each_runner_is_judged_on_its_own_targets(installed: dict[str, str | None], caplog) -> None:
    """0.34's code: V1 absent (not there), both V2-style runners accepted. A V2 target changed: V2 is
    left to vLLM with a warning naming the target, the CPU runner is still served. Relabelled audited
    code is accepted whatever the version string."""
    installed.update(audit.AUDITED["0.34.0"])
    verdicts = models.runner_verdicts("0.34.0")
    assert not verdicts["v1"].present
    assert verdicts["v2"].release == verdicts["v2-cpu"].release == "0.34.0"
    assert models.accepted_runners("0.34.0+cpu.custom") == ["v2", "v2-cpu"]

    changed = "vllm.v1.worker.gpu.mm.rope:_prepare_rope_positions_kernel"
    installed[changed] = "0" * 64
    models.runner_verdicts.cache_clear()
    with caplog.at_level(logging.WARNING, logger="mrope.integrations.vllm"):
        assert models.accepted_runners("9.9.9") == ["v2-cpu"]
    assert "Model Runner V2 (GPU) that mrope's integration patches differs" in caplog.text
    assert changed in caplog.text

    installed.clear()
    installed.update(audit.AUDITED["0.32.0"])
    models.runner_verdicts.cache_clear()
    assert models.accepted_runners("0.32.0") == ["v1", "v2"]


def test_enable_refuses_when_every_present_runner_differs(installed: dict[str, str | None]) -> None:
    installed.update(audit.AUDITED["0.33.0"])
    installed[audit.RUNNERS["v1"][0]] = "0" * 64  # one patched method changed
    installed[audit.RUNNERS["v2"][0]] = "1" * 64
    with pytest.raises(mrope.MRopeError, match=r"9\.9\.8: the code of the V1 model runner .*_init_mrope_pos"):
        models.accepted_runners("9.9.8")


def test_enable_refuses_an_unknown_mode() -> None:
    with pytest.raises(mrope.MRopeError, match="mode must be one of"):
        plugin.enable("fast")


@pytest.mark.parametrize("value", ["1", "check"])
def test_entry_point_warns_and_leaves_vllm_alone(
    fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    monkeypatch.setenv(plugin.ENV_VAR, value)
    with caplog.at_level(logging.WARNING, logger="mrope.integrations.vllm"):
        plugin.register()
    assert plugin.is_enabled() is None
    assert "vLLM 0.31.0 has none of the model runners mrope serves" in caplog.text


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
    with caplog.at_level(logging.WARNING, logger="mrope.integrations.vllm"):
        plugin.register()
    assert plugin.is_enabled() is None
    assert caplog.text == ""


def test_entry_point_refuses_an_unknown_mode(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(plugin.ENV_VAR, "fast")
    with caplog.at_level(logging.WARNING, logger="mrope.integrations.vllm"):
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
    patches = Patches()
    patches.apply(InputBatch, "add_request", batch_add)
    patches.apply(DefaultModelState, "add_request", state_add)
    assert (InputBatch().add_request(), DefaultModelState().add_request()) == ("mrope batch", "mrope state")
    assert InputBatch.add_request.__name__ == "add_request"
    with pytest.raises(mrope.MRopeError, match="add_request twice"):
        patches.apply(InputBatch, "add_request", batch_add)
    patches.restore()
    assert (vars(InputBatch)["add_request"], vars(DefaultModelState)["add_request"]) == originals
    assert (InputBatch().add_request(), DefaultModelState().add_request()) == ("batch", "state")
