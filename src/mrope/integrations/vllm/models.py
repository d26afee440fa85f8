"""Which vLLM code mrope serves: the runners the installed vLLM has and was audited for, and, per runner's
model, whether mrope's rule, positions mode or vLLM's own path serves it. One rule for every runner;
nothing here patches anything.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..._errors import MRopeError
from ...families import Family, from_config
from .audit import (
    AUDITED,
    RUNNER_TARGETS,
    RUNNERS,
    Verdict,
    family_verdict,
    installed_digests,
    present_in,
    runner_verdict,
)
from .features import VLLM_SETTINGS, unsupported_reason
from .state import STATS

logger = logging.getLogger("mrope.integrations.vllm")

#: the runners' names in words, for messages
RUNNER_NAMES = {
    "v1": "the V1 model runner",
    "v2": "Model Runner V2 (GPU)",
    "v2-cpu": "the CPU model runner (vllm/v1/worker/cpu)",
}


def installed_version() -> str:
    """The installed vLLM's version string (raises :class:`MRopeError` where vLLM is not installed)."""
    try:
        import vllm
    except ImportError as error:
        raise MRopeError("vLLM is not installed") from error
    return str(getattr(vllm, "__version__", "unknown"))


@functools.cache
def runner_verdicts(version: str) -> dict[str, Verdict]:
    """Each runner of :data:`RUNNERS` judged on its own targets in the installed vLLM (computed once per
    process; ``version`` names the release preferred where several audited ones have the same code)."""
    digests = installed_digests(RUNNER_TARGETS)
    return {runner: runner_verdict(runner, digests, version) for runner in RUNNERS}


def accepted_runners(version: str) -> list[str]:
    """The runners mrope serves in the installed vLLM, each logged once: a runner whose code differs
    from every audited release is named with its differing targets and left to vLLM. Raises
    :class:`MRopeError` where none is accepted (no runner there, or every one differs)."""
    verdicts = runner_verdicts(version)
    accepted = [name for name, verdict in verdicts.items() if verdict.accepted]
    problems = [_difference(version, v) for v in verdicts.values() if v.present and not v.accepted]
    for problem in problems if accepted else ():
        logger.warning("mrope: %s; vLLM's own M-RoPE path serves that runner", problem)
    if not accepted:
        if not problems:
            raise MRopeError(
                f"vLLM {version} has none of the model runners mrope serves ({', '.join(RUNNERS)})"
            )
        raise MRopeError("; ".join(problems) + "; vLLM's own M-RoPE path stays")
    for name in accepted:
        release = verdicts[name].release
        if version.split("+")[0] != release:
            logger.info("mrope: vLLM %s: %s has the code of the audited release %s", version, name, release)
    return accepted


def _difference(version: str, verdict: Verdict) -> str:
    differing = verdict.differing
    named = ", ".join(differing[:4]) + (f" and {len(differing) - 4} more" if len(differing) > 4 else "")
    return (
        f"vLLM {version}: the code of {RUNNER_NAMES[verdict.unit]} that mrope's integration patches differs "
        f"from every audited release ({', '.join(AUDITED)}): {named}"
    )


def family_reason(family: Family) -> str | None:
    """Why mrope's rule does not serve a runner of this model (positions mode serves it): the rule
    differs from vLLM's, vLLM has no code for the model (Keye-VL past 0.33), or its code is not an
    audited release's (None: the rule serves it)."""
    reason = unsupported_reason(family)
    if reason is not None:
        return reason
    version = installed_version()
    verdict = family_verdict(family.model_type, version)
    if verdict is None:
        return f"vLLM's {family.model_type} position code was not audited for mrope"
    if not verdict.present:
        return (
            f"vLLM {version} has no {family.model_type} position code of its own (mrope's rule reproduces "
            f"that of {', '.join(present_in(family.model_type))})"
        )
    if not verdict.accepted:
        return (
            f"vLLM's {family.model_type} code differs from every audited release ({', '.join(AUDITED)}): "
            f"{', '.join(verdict.differing)}"
        )
    return None


#: what the position rows of vLLM's models with other rows than (t, h, w) hold, by architecture (named
#: in :func:`vllm_path_reason`'s message)
OTHER_ROWS: dict[str, str] = {
    # vLLM 0.34, ``dash_attention.prompt_page_positions``: (4, L) int64, delta 0
    "UnlimitedOCRForCausalLM": (
        "Unlimited-OCR-2's DASH page positions: token offset in its page, page number, page count, "
        "-(its page's prompt tokens) - 1; the fourth row is negative on every prompt token (the sign by "
        "which DASH's decode tells a prompt position from index + delta) and the first restarts at each "
        "<PAGE> marker, so neither mrope's tables (positions >= 0) nor its segment rows (index rows, then "
        "t, h, w) hold them"
    ),
}


def vllm_path_reason(model_config: Any, *, pruning: bool) -> str | None:
    """Why a runner's positions stay on vLLM's own path whatever its model (None: a table serves it):
    position rows other than 3 (:data:`OTHER_ROWS` says what a known model's hold); in the V1 runner
    (``pruning`` True there), video token pruning. Never raises."""
    num_dims = getattr(model_config, "mrope_num_dims", 3)
    if num_dims != 3:
        hf_config = getattr(model_config, "hf_config", None)
        architectures = getattr(hf_config, "architectures", None) or ()
        held = next((f" ({OTHER_ROWS[a]})" for a in architectures if a in OTHER_ROWS), "")
        return (
            f"the model has {num_dims} M-RoPE position rows{held}; mrope's vLLM integration serves 3 "
            "(t, h, w)"
        )
    if pruning:
        return "video token pruning (EVS) in the V1 runner reads and rewrites the stored positions"
    return None


def served_family(model_config: Any) -> tuple[Family | None, str | None]:
    """The family whose rule mrope serves a runner's model with, or why positions mode serves it: no
    family, a model mrope does not serve as vLLM does, or whose vLLM code was not audited. Never raises."""
    try:
        family = from_config(model_config.hf_config, **VLLM_SETTINGS)
        reason = family_reason(family)
    except Exception as error:
        return None, str(error)
    return (family, None) if reason is None else (None, reason)


def note_positions_mode(reason: str | None) -> None:
    """Log and count a runner served in positions mode (``reason``: why mrope's rule does not serve it)."""
    logger.warning("mrope: %s; mrope serves this model's steps from vLLM's own prompt positions", reason)
    STATS["positions_runners"] += 1
