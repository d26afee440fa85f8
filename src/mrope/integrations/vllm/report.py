"""What a user of ``vllm serve`` sees of the plugin: its lines in vLLM's log (:mod:`.._report`).

vLLM's server runs the model runner in its engine-core process, where :func:`.stats` lives. There, at
a runner's first model state (V2) or first admission (V1), one INFO line per runner says what mrope
serves (:func:`note_runner`: the runner, the family or positions mode and why, the audited release), or
nothing more than the warning already logged where the runner stays on vLLM's path; from then on the
counters are logged every ``MROPE_STATS_INTERVAL`` seconds when they changed and at the process's exit
(:data:`COUNTERS`). :func:`show_in_vllm_log` sends mrope's lines to vLLM's own log handler where
nothing else would show them (vLLM's logging configuration covers its ``vllm`` logger only).
"""

from __future__ import annotations

import logging

from ..._errors import note_once
from ...families import Family
from .._report import CountersLog
from .models import RUNNER_NAMES, installed_version, runner_verdicts
from .state import STATS, logger, mode

#: this process's counters as log lines (started by :func:`note_runner`)
COUNTERS = CountersLog(logger, lambda: dict(STATS))


def note_runner(runner: str, family: Family | None, why: str | None, *, served: bool) -> None:
    """A model runner of this process met the plugin: start the counters lines and, where a table
    serves it (``served``), log once what serves it: ``family``'s rule, or positions mode (``family``
    None, ``why``: the reason). Never raises."""
    try:
        name = RUNNER_NAMES.get(runner, runner)
        COUNTERS.start(f"{name} of vLLM")
        if not served:
            return
        version = installed_version()
        release = runner_verdicts(version)[runner].release
        if family is not None:
            how = f"by mrope's {family.model_type} rule"
        else:
            how = f"in positions mode (vLLM's prompt positions, mrope's steps: {why})"
        note_once(
            f"serving {runner} {how}",
            "mrope: serves the M-RoPE positions of %s %s, mode %s; vLLM %s, audited release %s",
            name,
            how,
            mode(),
            version,
            release,
            log=logger,
            level=logging.INFO,
        )
    except Exception as error:  # a missing line, never a failed engine
        logger.debug("mrope: no serving line: %s", error)


def show_in_vllm_log() -> None:
    """Give mrope's logger vLLM's log handlers and level where no handler would show its lines (neither
    its own nor the root logger's: vLLM configures its ``vllm`` logger only), so that what mrope says
    appears in vLLM's log, formatted as vLLM's lines. Does nothing where logging was configured (a
    handler on ``mrope`` or on the root logger) or where vLLM's logger has no handler
    (``VLLM_CONFIGURE_LOGGING=0``). Never raises."""
    try:
        ours = logging.getLogger("mrope")
        vllm_logger = logging.getLogger("vllm")
        if ours.handlers or logging.getLogger().handlers or not vllm_logger.handlers:
            return
        for handler in vllm_logger.handlers:
            ours.addHandler(handler)
        if ours.level == logging.NOTSET:
            ours.setLevel(vllm_logger.getEffectiveLevel())
    except Exception as error:  # vLLM's logging stays as it is
        logger.debug("mrope: vLLM's log handlers not shared: %s", error)
