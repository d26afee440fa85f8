"""Applying M-RoPE to query and key: the layouts, the float32 cos/sin cache, the native torch path, the
module and the config reader.

Every family rotates ``rotary_dim`` leading channels of each head with ``rotary_dim // 2`` frequencies;
frequency ``j`` takes its angle from one of the three position rows (t, h, w) (HunYuan-VL: each channel
of the pair from one of its rows). Which row is the *layout*:

``"chunked"`` (Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni, PaddleOCR-VL, GLM-4.1V/4.5V, GLM-OCR)
    ``mrope_section = (t, h, w)``: the first ``t`` frequencies from the t row, the next ``h`` from h, the
    rest from w.
``"interleaved"`` (Qwen3-VL, Qwen3-VL-MoE, Qwen3-Omni, Qwen3.5)
    ``mrope_section = (t, h, w)``: frequency ``j`` takes h if ``j % 3 == 1 and j < 3 * h``, w if
    ``j % 3 == 2 and j < 3 * w``, else t.
``"ernie"`` (Ernie-4.5-VL)
    ``mrope_section = (h, w, t)`` as Ernie's config stores it: the first ``h + w`` frequencies alternate
    h (even ``j``) and w (odd ``j``), the rest take t.
``"hunyuan"`` (HunYuan-VL)
    One row of positions per ``mrope_section`` entry (``num_dims``, 4 in its checkpoints), and the two
    channels of a pair can take different rows: the rotated channels, the pairs' first then their second
    (transformers' ``cat((freqs, freqs))``), split into chunks of ``2 * mrope_section[i]``, chunk ``i``
    from row ``i``. Pair ``j`` rotates as ``(x1 cos(a) - x2 sin(a), x2 cos(b) + x1 sin(b))``, ``a`` and
    ``b`` its channels' angles (equal in the other layouts).

``is_neox_style`` picks the channel pairs: NeoX pairs ``(i, i + rotary_dim // 2)``, or GPT-J pairs
``(2i, 2i + 1)`` (GLM-4.1V, GLM-OCR, Ernie). Channels past ``rotary_dim`` pass through.

The arithmetic is float32 and rounds once to the input dtype; the cache is built exactly as
transformers builds its angles, so float32 results match transformers to the last bit or two.

Modules by concern: :mod:`.layouts` (which row each frequency, or channel, takes), :mod:`.cache` (the
cache and the gather of each token's row), :mod:`.checks` (the boundary checks), :mod:`.native` (the torch
rotation, taking tensors), :mod:`.module` (:class:`MRotaryEmbedding`, which picks native or Triton once
per device), :mod:`.functional` (the operations the module runs) and :mod:`.config` (the module of a
config or a family); the Triton kernel is :mod:`mrope.ops.mrope_rotary`.
"""

# the cache builder, the layout table and the limits stay importable from here beside ``__all__``
from .cache import MAX_POSITION_LIMIT as MAX_POSITION_LIMIT
from .cache import build_cos_sin_cache as build_cos_sin_cache
from .config import rotary_embedding_for, rotary_embedding_from_config
from .functional import apply_mrope, apply_mrope_inplace
from .layouts import LAYOUTS
from .layouts import pair_rows as pair_rows
from .layouts import section_rows as section_rows
from .module import BACKENDS as BACKENDS
from .module import MRotaryEmbedding

__all__ = [
    "LAYOUTS",
    "MRotaryEmbedding",
    "apply_mrope",
    "apply_mrope_inplace",
    "rotary_embedding_for",
    "rotary_embedding_from_config",
]
