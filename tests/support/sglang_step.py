"""A scheduled SGLang batch and the forward batch of its step, as the step tests hand them to mrope's
SGLang step (``tests/integrations/sglang``): the fields SGLang's methods and mrope's read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch


def step_batch(
    reqs: list[Any],
    mms: list[Any],
    slots: list[int],
    prefix: list[int],
    extend: list[int],
    *,
    sglang_methods: bool = False,
) -> tuple[Any, Any]:
    """``(batch, forward_batch)`` of one extend step of ``reqs`` in pool ``slots``; with
    ``sglang_methods`` the forward batch is SGLang's ``ForwardBatch`` (its methods, these fields)."""
    seq_lens = torch.tensor(prefix) + torch.tensor(extend)
    batch = SimpleNamespace(
        req_pool_indices_cpu=torch.tensor(slots),
        reqs=reqs,
        multimodal_inputs=mms,
        prefix_lens=prefix,
        extend_lens=extend,
    )
    fields = {
        "seq_lens": seq_lens,
        "seq_lens_cpu": seq_lens,
        "req_pool_indices": torch.tensor(slots),
        "extend_num_tokens": sum(extend),
        "extend_prefix_lens": torch.tensor(prefix, dtype=torch.int32),
        "extend_seq_lens": torch.tensor(extend, dtype=torch.int32),
    }
    if not sglang_methods:
        return batch, SimpleNamespace(**fields)
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    forward_batch = ForwardBatch.__new__(ForwardBatch)
    vars(forward_batch).update(fields, mrope_positions=None)
    return batch, forward_batch
