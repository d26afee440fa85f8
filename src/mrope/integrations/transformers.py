"""mrope inside transformers: a VLM whose 3-D positions come from mrope, and one call for data pipelines.

:func:`patch` makes a loaded transformers VLM compute its M-RoPE positions with mrope. transformers
(5.x) computes them in one method of the model, ``get_rope_index``: ``generate()`` calls it once at
prefill (with every model keyword argument: mask, ``mm_token_type_ids``, grids, times, pixel tensors)
and then advances every row by one; ``forward()`` without ``position_ids`` calls it when the cache is
empty, stores ``rope_deltas`` and later uses ``index + rope_deltas``. The patch replaces that method on
the model object (not its class): it takes the same arguments, returns positions in the dtype and on
the device of ``input_ids`` and the same ``rope_deltas``, so transformers' loop around it is unchanged.
The token ids, merge sizes and time scales are read from the model's config once, at :func:`patch`;
the token types are read from the ids (``mm_token_type_ids`` is accepted and not needed). A family's
other inputs (its ``extra_inputs``: GLM-Image's ``images_per_sample``, MiniCPM-V 4.7's ``target_sizes``,
``target_sizes_videos`` and ``downsample_mode``) are passed on by transformers' names for them.
GLM-Image's generated tokens do not take ``index + delta`` (``family.decode_follows_index`` is False):
its forward positions them from two attributes its own ``get_rope_index`` sets at prefill, which the
patched method sets too, ``_cached_decode_position_ids`` (from ``family.batch_generation_positions``)
and ``_prefill_len``.
:func:`unpatch` restores transformers' own method. (transformers' two paths differ, patched or not,
where a video's T exceeds max(H', W') under its convention: ``index + rope_deltas`` continues from the
largest position, ``generate()`` from the last one.)

:func:`rope_index` is the same computation for a data pipeline: from a processor's output (a dict or
``BatchFeature``) to ``(position_ids, rope_deltas)``, for a batch or a single sample, so that training
can pass ``position_ids`` to ``forward()`` instead of having the model compute them per step.

``compat=None`` (both calls) means the family's own, as everywhere in mrope
(:func:`mrope.families.family_for`): a family passed keeps its ``compat``, and a model's config is read
under the installed transformers' convention: ``"transformers"`` from 5.3 on (text after a vision block
resumes at ``base + max(H', W')``), ``"vllm"`` before; results then equal transformers' own,
Qwen2.5-VL's scaled video time included: it is computed in the dtype of the
``second_per_grid_ts`` tensor handed over (bfloat16 or float16 once the inputs were cast with
``.to(dtype)``), as transformers computes it (``compat="vllm"`` keeps vLLM's and SGLang's arithmetic).
Omni thinkers follow transformers' thinker code under either value; transformers leaves 1 in padded
slots where mrope leaves 0 (the README's convention table), which no real token reads.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import MRopeError, from_config, get_rope_index, supported_model_types
from .._arrays import like_input, to_numpy
from ..core import COMPATS, Compat
from ..families import Family, family_for

__all__ = ["MRopeRopeIndex", "installed_compat", "is_patched", "patch", "rope_index", "unpatch"]

#: the first transformers release whose text after a vision block resumes at ``base + max(H', W')``
TRANSFORMERS_CONVENTION_SINCE = (5, 3)
# transformers' names of the per-video seconds (VLMs, Omni thinkers) and of the Omni audio inputs
_SECONDS_NAMES = ("second_per_grid_ts", "second_per_grids")
_AUDIO_NAMES = ("audio_seqlens", "use_audio_in_video")


@functools.cache
def installed_compat() -> Compat:
    """The convention of the installed transformers: ``"transformers"`` from 5.3 on, else ``"vllm"``."""
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        raise MRopeError(
            "compat=None follows the installed transformers, which is not installed: pass compat='vllm' "
            "or compat='transformers'"
        ) from None
    numbers = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        numbers.append(int(digits or 0))
    return "transformers" if tuple(numbers) >= TRANSFORMERS_CONVENTION_SINCE else "vllm"


def _resolve_compat(compat: str | None) -> Compat:
    """The compat a model's config is read under: ``compat``, or the installed transformers' for None."""
    if compat is None:
        return installed_compat()
    if compat not in COMPATS:
        raise MRopeError(f"compat must be None, 'vllm' or 'transformers', got {compat!r}")
    return compat  # type: ignore[return-value]


class MRopeRopeIndex:
    """The ``get_rope_index`` that :func:`patch` puts on a model object (its owner): transformers'
    signature (positional names taken from the model class's own method), mrope's positions; for a
    family whose decode does not follow the index, the owner's decode cache set as transformers sets it."""

    def __init__(self, family: Any, original: Any, owner: Any) -> None:
        self.family = family
        self.compat = family.compat
        # weak: the owner holds this object, which would otherwise keep it alive in a reference cycle
        self.owner = weakref.ref(owner)
        parameters = list(inspect.signature(original).parameters.values())[1:]  # without self
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.positional_names = tuple(p.name for p in parameters if p.kind in positional)
        names = {p.name for p in parameters}
        # read only what transformers' method reads: a family that does not scale time gets no seconds
        self.seconds_name = next((n for n in _SECONDS_NAMES if n in names), None)
        self.takes_audio = all(n in names for n in _AUDIO_NAMES)
        # the family's other inputs (GLM-Image's images_per_sample, MiniCPM-V 4.7's target sizes and
        # downsample_mode), passed by transformers' names, which are the family's
        self.extra_names = tuple(n for n in family.extra_inputs if n not in _AUDIO_NAMES)

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if args:
            if len(args) > len(self.positional_names):
                raise TypeError(
                    f"get_rope_index takes {len(self.positional_names)} positional arguments, got {len(args)}"
                )
            for name, value in zip(self.positional_names, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"get_rope_index got multiple values for argument {name!r}")
                kwargs[name] = value
        input_ids = kwargs.get("input_ids")
        if input_ids is None:
            raise MRopeError("get_rope_index needs input_ids (mrope reads the token types from the ids)")
        inputs: dict[str, Any] = {}
        if self.seconds_name is not None:
            inputs["second_per_grid_ts"] = kwargs.get(self.seconds_name)
        if self.takes_audio:
            inputs["audio_seqlens"] = kwargs.get("audio_seqlens")
            inputs["use_audio_in_video"] = bool(kwargs.get("use_audio_in_video"))
        for name in self.extra_names:
            inputs[name] = kwargs.get(name)
        positions, deltas = get_rope_index(
            self.family,
            input_ids,
            image_grid_thw=kwargs.get("image_grid_thw"),
            video_grid_thw=kwargs.get("video_grid_thw"),
            attention_mask=kwargs.get("attention_mask"),
            **inputs,
        )
        if not self.family.decode_follows_index:
            self.cache_decode_positions(
                input_ids, kwargs.get("image_grid_thw"), kwargs.get("attention_mask"), inputs
            )
        return _in_dtype_of(positions, input_ids), deltas

    def cache_decode_positions(
        self, input_ids: Any, image_grid_thw: Any, attention_mask: Any, inputs: dict[str, Any]
    ) -> None:
        """Set on the owner what transformers' own method sets at prefill for a family whose decode does
        not follow the index: ``_cached_decode_position_ids`` ((B, 3, n) long, each row's generation
        positions padded by repeating its last column; None when no row has grids) and ``_prefill_len``."""
        owner = self.owner()
        if owner is None:
            raise MRopeError("the model this get_rope_index was patched onto no longer exists")
        rows = self.family.batch_generation_positions(
            input_ids, image_grid_thw=image_grid_thw, attention_mask=attention_mask, **inputs
        )
        lengths = [row.shape[1] for row in rows]
        cache = None
        if any(lengths):
            without = [r for r, n in enumerate(lengths) if not n]
            if without:
                raise MRopeError(
                    f"{self.family.model_type}: rows {without} of the batch have no image grids and the "
                    "others do: transformers' decode cache then holds fewer rows than the batch (the "
                    "positions of its generated tokens are ill-defined); generate those rows apart"
                )
            width = max(lengths)
            padded = np.stack([np.pad(row, ((0, 0), (0, width - row.shape[1])), mode="edge") for row in rows])
            cache = like_input(padded.astype(np.int64, copy=False), input_ids)
        owner._cached_decode_position_ids = cache
        owner._prefill_len = input_ids.shape[1]


def _owners(model: Any) -> list[Any]:
    """The objects of ``model`` whose ``get_rope_index`` transformers calls: the inner model (its
    ``forward``) and, for Omni thinkers, the ``...ForConditionalGeneration`` too (its ``generate``)."""
    root = model
    thinker = getattr(model, "thinker", None)  # a whole Omni model: the thinker places the positions
    if thinker is not None and callable(getattr(type(thinker), "get_rope_index", None)):
        root = thinker
    candidates = [root, getattr(root, "model", None)]
    owners = [m for m in candidates if m is not None and callable(getattr(type(m), "get_rope_index", None))]
    if not any(hasattr(m, "rope_deltas") for m in owners):
        config = getattr(model, "config", None)
        kind = f" (model_type {config.model_type!r})" if hasattr(config, "model_type") else ""
        raise MRopeError(
            f"{type(model).__name__}{kind} is not a transformers M-RoPE VLM: it has no get_rope_index "
            f"and rope_deltas; mrope supports the model types {', '.join(supported_model_types())}"
        )
    return owners


def _patched(owner: Any) -> MRopeRopeIndex | None:
    found = vars(owner).get("get_rope_index")
    return found if isinstance(found, MRopeRopeIndex) else None


def patch(model: Any, *, compat: Compat | None = None) -> Any:
    """Make ``model`` compute its 3-D positions with mrope; returns ``model``.

    Parameters
    ----------
    model : a transformers VLM: its ``...ForConditionalGeneration``, its inner ``...Model``, an Omni
        thinker (or a whole Omni model, whose thinker is patched).
    compat : ``None`` (default: the family's own, the model's config read under the installed
        transformers' convention, so that positions, ``rope_deltas`` and generated tokens equal
        transformers'), ``"vllm"`` or ``"transformers"``.

    Raises
    ------
    MRopeError
        ``model`` is not a transformers M-RoPE VLM, or its ``model_type`` is one mrope does not support
        (the message names its type); ``compat`` unknown or different from an existing patch's.

    Notes
    -----
    Patching is idempotent: patching a patched model with the same ``compat`` changes nothing; with
    another ``compat`` it raises (call :func:`unpatch` first). The model's cached ``rope_deltas`` are
    cleared, since they came from the other position code.
    """
    compat = _resolve_compat(compat)
    owners = _owners(model)
    existing = [p for p in map(_patched, owners) if p is not None]
    if any(p.compat != compat for p in existing):
        raise MRopeError(
            f"{type(model).__name__} is already patched with compat={existing[0].compat!r}: call unpatch() "
            f"before patching with compat={compat!r}"
        )
    if existing:  # patched (an Omni thinker's inner model alone, perhaps): the same family everywhere
        family = existing[0].family
    else:
        try:
            family = from_config(owners[-1].config, compat=compat)
        except MRopeError as err:
            raise MRopeError(f"{type(model).__name__} cannot be patched: {err}") from None
    missing = [owner for owner in owners if _patched(owner) is None]
    replacements = [(owner, MRopeRopeIndex(family, type(owner).get_rope_index, owner)) for owner in missing]
    for owner, replacement in replacements:
        owner.get_rope_index = replacement
        if hasattr(owner, "rope_deltas"):
            owner.rope_deltas = None
    return model


def unpatch(model: Any) -> Any:
    """Give ``model`` back transformers' own position code; returns ``model``. A model that is not
    patched is returned unchanged; one that is not a transformers M-RoPE VLM raises
    :class:`MRopeError`."""
    owners = _owners(model)
    if not any(_patched(owner) is not None for owner in owners):
        return model
    for owner in owners:
        if _patched(owner) is not None:
            del owner.get_rope_index
        if hasattr(owner, "rope_deltas"):
            owner.rope_deltas = None
    return model


def is_patched(model: Any) -> bool:
    """Whether :func:`patch` is in effect on ``model``."""
    return any(_patched(owner) is not None for owner in _owners(model))


# -- data pipelines ---------------------------------------------------------------------------------------
# the processors' names of the per-video seconds (VLMs, Omni); the first one present is read
_SECONDS_KEYS = ("second_per_grid_ts", "video_second_per_grid")


def rope_index(
    config: Any,
    inputs: Mapping[str, Any],
    *,
    compat: Compat | None = None,
    use_audio_in_video: bool | None = None,
) -> tuple[Any, Any]:
    """``(position_ids, rope_deltas)`` of a processor's output, as the model's ``forward()`` computes them.

    For a ``torch.utils.data.Dataset`` (one sample) or a collate function (a padded batch): the result
    can be passed to ``forward(position_ids=...)``, and ``rope_deltas`` is what ``generate()`` stores
    for decoding.

    The arguments come in :func:`mrope.get_rope_index`'s order, config first; the old order
    ``rope_index(inputs, config)`` still works, with a ``DeprecationWarning``.

    Parameters
    ----------
    config : the model's transformers config (or its ``to_dict()``), or a family from
        :func:`mrope.from_config`.
    inputs : the processor's output (dict or ``BatchFeature``). Read: ``input_ids`` (``(B, L)`` or one
        sample ``(L,)``), ``attention_mask``, ``image_grid_thw``, ``video_grid_thw``,
        ``second_per_grid_ts`` (Omni: ``video_second_per_grid``; read only for families that scale video
        time, as transformers does), ``feature_attention_mask`` or ``audio_feature_lengths`` (Omni
        audio), ``images_per_sample`` (GLM-Image), ``target_sizes`` and ``target_sizes_videos``
        (MiniCPM-V 4.7; its ``downsample_mode`` is the config's, or ``from_config(config,
        downsample_mode=...)``'s). Everything else (``mm_token_type_ids``, pixel tensors) is ignored.
    compat : None (default: the family's own; a config is read under the installed transformers'
        convention), ``"vllm"`` or ``"transformers"`` (a family is then used under it).
    use_audio_in_video : Omni only: every video carries its audio (the processor's argument of that name).

    Returns
    -------
    position_ids : ``(3, B, L)``, or ``(3, L)`` for 1-D ``input_ids``; the dtype of ``input_ids``
        (float32 for Qwen3-Omni); padded slots hold 0.
    rope_deltas : ``(B, 1)``, or ``(1,)`` for 1-D ``input_ids`` (stacking samples gives ``(B, 1)``).
        Torch tensors on the device of ``input_ids`` when it is a tensor, numpy arrays otherwise.
    """
    if _is_config(inputs) and not _is_config(config):  # the old order, rope_index(inputs, config)
        warnings.warn(
            "rope_index(inputs, config) is the old argument order: call rope_index(config, inputs), as "
            "get_rope_index(config, input_ids)",
            DeprecationWarning,
            stacklevel=2,
        )
        config, inputs = inputs, config
    if not isinstance(inputs, Mapping):
        raise MRopeError(
            f"inputs must be a processor's output (a dict or BatchFeature), got {type(inputs).__name__}"
        )
    if inputs.get("input_ids") is None:
        raise MRopeError("inputs has no input_ids: rope_index needs the token ids")
    input_ids, mask = inputs["input_ids"], inputs.get("attention_mask")
    if not hasattr(input_ids, "ndim"):  # a list: read here, so that a ragged one is named
        input_ids = to_numpy(input_ids, name="input_ids")
    if mask is not None and not hasattr(mask, "ndim"):
        mask = to_numpy(mask, name="attention_mask")
    if compat is not None or isinstance(config, Family):
        family = family_for(config, compat if compat is None else _resolve_compat(compat))
    else:
        family = family_for(config, default=installed_compat())
    single = np.ndim(input_ids) == 1
    if single:  # one sample: a batch of one
        input_ids = input_ids[None] if hasattr(input_ids, "ndim") else [input_ids]
        if mask is not None:
            mask = mask[None] if hasattr(mask, "ndim") else [mask]
    extra: dict[str, Any] = {}
    if family.uses_second_per_grid_ts:  # as transformers: other families ignore the processor's seconds
        extra["second_per_grid_ts"] = next(
            (inputs[k] for k in _SECONDS_KEYS if inputs.get(k) is not None), None
        )
    feature_mask = inputs.get("feature_attention_mask")
    if feature_mask is None:
        audio_seqlens = inputs.get("audio_feature_lengths")
    else:
        audio_seqlens = _audio_lengths(feature_mask)
    if audio_seqlens is not None:
        extra["audio_seqlens"] = audio_seqlens
    if use_audio_in_video is not None:
        extra["use_audio_in_video"] = use_audio_in_video
    for name in family.extra_inputs:  # the family's others (GLM-Image, MiniCPM-V 4.7), by their names
        if name not in _AUDIO_NAMES:
            extra[name] = inputs.get(name)
    positions, deltas = get_rope_index(
        family,
        input_ids,
        image_grid_thw=inputs.get("image_grid_thw"),
        video_grid_thw=inputs.get("video_grid_thw"),
        attention_mask=mask,
        **extra,
    )
    positions = _in_dtype_of(positions, input_ids)
    if single:
        return positions[:, 0], deltas[0]
    return positions, deltas


def _is_config(value: Any) -> bool:
    """Whether ``value`` is a model's config or family (not a processor's output)."""
    if isinstance(value, Family):
        return True
    if isinstance(value, Mapping):
        return "model_type" in value
    return hasattr(value, "to_dict") and hasattr(value, "model_type")


def _audio_lengths(feature_mask: Any) -> np.ndarray:
    """Each audio's feature length from the processor's ``feature_attention_mask`` (num_audios, L) of
    0/1 (a tensor, an array or a list)."""
    mask = to_numpy(feature_mask, name="feature_attention_mask")
    if mask.ndim != 2:
        raise MRopeError(
            f"feature_attention_mask must be (num_audios, length), got shape {tuple(mask.shape)}"
        )
    if mask.dtype.kind not in "biu" and not (mask.size == 0 and mask.dtype == np.float64):
        raise MRopeError(f"feature_attention_mask must hold 0/1 integers or bools, got dtype {mask.dtype}")
    return mask.sum(-1, dtype=np.int64)


def _in_dtype_of(positions: Any, input_ids: Any) -> Any:
    """Integer positions in the integer dtype of ``input_ids``, as transformers returns them (float
    positions, Qwen3-Omni's, stay float32)."""
    dtype = getattr(input_ids, "dtype", None)
    if dtype is None or dtype == positions.dtype:
        return positions
    if isinstance(positions, np.ndarray):
        return positions.astype(dtype) if positions.dtype.kind in "iu" and dtype.kind in "iu" else positions
    return positions if positions.is_floating_point() or dtype.is_floating_point else positions.to(dtype)
