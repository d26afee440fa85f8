"""The step half of mrope's SGLang integration: a model runner's :class:`mrope.PositionTable`, keyed by
SGLang's request slot (``req_pool_idx``), and the extend, decode and speculative positions it writes.

A slot's request is registered when the slot's generation in SGLang's request pool
(``ReqToTokenPool.req_generation``, bumped at every allocation) differs from the one registered: a
vectorized comparison per step, a Python call per new request only. A request whose prompt the
tokenizer process packed (:class:`mrope.serving.PackedPrompt`, carried by its multimodal inputs) is
registered by copying those segment rows (:meth:`PositionTable.add_packed`: bytes per item, nothing
per token); a text-only request is one text segment, the same way. Requests without a packed prompt
(another process's positions, an SGLang path mrope did not see): images from their prompt, grids and
offsets (:meth:`PositionTable.add`, nothing scanned), others (videos) from SGLang's stored prompt
positions (``MultimodalInputs.mrope_positions``). Either way the state is O(images + frames).

A family whose decode does not follow the index (GLM-Image: ``Family.decode_follows_index`` False) is
registered from the stored positions, which SGLang's processor extends past the prompt over the tokens
the request generates (SGLang's items keep only the source images' grids, not the target ones); its
decode is a ``fill`` of each request's last token (inside those positions, then the index), and its
speculative steps stay on SGLang's path (``index + delta`` there, the stored positions unread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .._errors import MRopeError
from ..families import Family
from ..serving import PackedPrompt, PositionTable

_MISSING = object()
#: the attribute of SGLang's ``MultimodalProcessorOutput`` (tokenizer process) and ``MultimodalInputs``
#: (scheduler process) that holds a request's :class:`mrope.serving.PackedPrompt`
PACKED_ATTRIBUTE = "mrope_packed"


def packed_prompt(holder: Any) -> PackedPrompt | None:
    """The packed prompt ``holder`` (an SGLang processor output or multimodal inputs) carries, or None."""
    values = getattr(holder, "__dict__", None)
    return None if values is None else values.get(PACKED_ATTRIBUTE)


class RunnerTable:
    """A model runner's table, the generation registered per slot, and the slots mrope refused."""

    def __init__(
        self,
        family: Family,
        pool: Any,
        device: Any,
        count: Callable[[str], None],
        warn: Any,
        host: bool | None = None,
    ) -> None:
        """``host``: the numpy step on the tensors' host memory (default: where ``device`` is the CPU),
        else the torch step on ``device``."""
        size = int(pool.req_generation.shape[0])  # every row of SGLang's pool, its padding row 0 included
        self.family = family
        self.pool = pool
        self.table = PositionTable(size, device=device)
        self.generation = np.full(size, -1, dtype=np.int64)
        self.refused = np.zeros(size, dtype=bool)
        self.count, self.warn = count, warn
        # read each step: the pool's generation counter as a numpy view (its memory, bound once), the
        # refused slots' count (none: nothing to look up), and SGLang's RL setting (fixed at start)
        self.pool_generation = pool.req_generation.numpy()
        self.num_refused = 0
        self.rl_on_policy = _rl_on_policy()
        self.host = torch.device(device).type == "cpu" if host is None else host
        if self.host:  # compile (or load) the steps for SGLang's array types now, not at a step
            none64, none32 = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
            self.table.fill(np.empty((3, 0), dtype=np.int64), none64, none32, none32)
            self.table.decode(np.empty((3, 0), dtype=np.int64), none64, none64)

    def serves(self, batch: Any) -> bool:
        """Register the batch's new requests; whether mrope writes this step (no refused request)."""
        slots_cpu = getattr(batch, "req_pool_indices_cpu", None)
        if slots_cpu is None or self.rl_on_policy:
            return False
        slots = slots_cpu.numpy()
        generation = self.pool_generation[slots]
        new = self.generation[slots] != generation
        if new.any():
            for i in np.flatnonzero(new).tolist():  # admission only: requests new to their slot
                self.admit(int(slots[i]), int(generation[i]), batch.reqs[i], batch.multimodal_inputs[i])
        return not (self.num_refused and self.refused[slots].any())

    def admit(self, slot: int, generation: int, req: Any, mm: Any) -> None:
        """Register ``req`` in ``slot``; a request mrope cannot register is refused (SGLang's path)."""
        if self.generation[slot] >= 0:
            self.count("reused_slots")
        self.generation[slot] = generation
        self.num_refused -= int(self.refused[slot])
        try:
            self.register(slot, req, mm)
        except Exception as error:  # its batches take SGLang's path
            self.refused[slot] = True
            self.num_refused += 1
            self.count("fallback_requests")
            self.warn(f"request {getattr(req, 'rid', '?')!r}", error)
            return
        self.refused[slot] = False
        self.count("admitted")

    def register(self, slot: int, req: Any, mm: Any) -> None:
        """Register ``req`` in ``slot``: by copying its packed prompt where it has one (made in the
        tokenizer process, :data:`PACKED_ATTRIBUTE`) or it is text only; else from its prompt and items."""
        if getattr(req, "session", None) is not None:
            raise MRopeError("session requests keep SGLang's positions (their history outgrows the prompt's)")
        if self.family.decode_follows_index:  # (else: SGLang's stored positions cover the generation)
            packed = PackedPrompt.text(len(req.origin_input_ids)) if mm is None else packed_prompt(mm)
            if packed is not None:  # the slot's earlier request replaced in the same call
                self.table.add_packed(slot, packed, replace=True)
                self.count("from_packed")
                return
        if slot in self.table:
            self.table.remove(slot)
        if mm is None:  # no items (offsets say so where the family takes them: nothing scanned)
            none = {"image_offsets": [], "video_offsets": []} if self.family.takes_offsets else {}
            self.table.add(slot, self.family, req.origin_input_ids, **none)
            return
        images = None
        if self.family.decode_follows_index:  # else: SGLang's stored positions cover the generation
            images = _image_inputs(self.family, req.origin_input_ids, mm.mm_items)
        if images is not None:
            ids, grids, offsets = images
            self.table.add(
                slot, self.family, ids, image_grid_thw=grids, image_offsets=offsets, video_offsets=[]
            )
            return
        if mm.mrope_positions is None or mm.mrope_position_delta is None:
            raise MRopeError("a multimodal request without stored M-RoPE positions")
        delta = int(mm.mrope_position_delta.reshape(-1)[0])
        self.table.add_positions(slot, mm.mrope_positions, delta)
        self.count("from_positions")

    def extend(self, fb: Any, batch: Any) -> torch.Tensor:
        """One ``fill`` of the extend step from the batch's own tensors: (3, extend_num_tokens)."""
        num = int(fb.extend_num_tokens)
        if self.host:  # the tensors' numpy views (no copy; SGLang's step tensors do not require grad:
            # one that did would raise, and SGLang's path would serve the step): the compiled step
            out = np.empty((3, num), dtype=np.int64)
            self.table.fill(
                out, fb.req_pool_indices.numpy(), fb.extend_prefix_lens.numpy(), fb.extend_seq_lens.numpy()
            )
            return torch.from_numpy(out)
        out = torch.empty((3, num), dtype=torch.int64, device=fb.seq_lens.device)
        self.table.fill(out, fb.req_pool_indices, fb.extend_prefix_lens, fb.extend_seq_lens, num_tokens=num)
        return out

    @property
    def serves_speculative(self) -> bool:
        """Whether speculative steps are mrope's: SGLang's are ``index + delta`` (its stored positions
        unread), the table's only where the family's decode follows the index."""
        return bool(self.family.decode_follows_index)

    def decode(self, fb: Any, batch: Any) -> torch.Tensor:
        """``seq_lens - 1 + delta[req_pool_indices]`` (the deltas on the device): (3, batch_size); a
        family whose decode does not follow the index: the table's ``fill`` of each last token."""
        if not self.family.decode_follows_index:
            return self.last_tokens(fb)
        if self.host:
            out = np.empty((3, fb.seq_lens.shape[0]), dtype=np.int64)
            self.table.decode(out, fb.req_pool_indices.numpy(), fb.seq_lens.numpy())
            return torch.from_numpy(out)
        out = torch.empty((3, fb.seq_lens.shape[0]), dtype=torch.int64, device=fb.seq_lens.device)
        self.table.decode(out, fb.req_pool_indices, fb.seq_lens)
        return out

    def last_tokens(self, fb: Any) -> torch.Tensor:
        """Each request's token at ``seq_lens - 1`` by ``fill`` (inside the registered positions too, as
        SGLang reads its stored ones there): (3, batch_size)."""
        num = int(fb.seq_lens.shape[0])
        if self.host:
            lens = fb.seq_lens.numpy()
            out = np.empty((3, num), dtype=np.int64)
            self.table.fill(out, fb.req_pool_indices.numpy(), lens - 1, np.ones_like(lens))
            return torch.from_numpy(out)
        out = torch.empty((3, num), dtype=torch.int64, device=fb.seq_lens.device)
        lens = fb.seq_lens
        self.table.fill(out, fb.req_pool_indices, lens - 1, torch.ones_like(lens), num_tokens=num)
        return out

    def speculative(self, fb: Any, batch: Any, seq_positions: Any) -> torch.Tensor:
        """``seq_positions + delta[req_pool_indices]`` (each request's draft tokens), on the device."""
        if seq_positions is None:
            seq_positions = batch.spec_info.positions
        per_request = seq_positions.reshape(fb.seq_lens.shape[0], -1)
        slots = fb.req_pool_indices.repeat_interleave(per_request.shape[1])
        seq_lens = per_request.reshape(-1).to(torch.int64) + 1
        if self.host:
            out = np.empty((3, seq_lens.shape[0]), dtype=np.int64)
            self.table.decode(out, slots.numpy(), seq_lens.numpy())
            return torch.from_numpy(out)
        out = torch.empty((3, seq_lens.shape[0]), dtype=torch.int64, device=fb.seq_lens.device)
        self.table.decode(out, slots, seq_lens)
        return out

    @staticmethod
    def compare(ours: torch.Tensor, sglang: torch.Tensor, batch: Any, per_request: int | None) -> None:
        """Check mode: the first column where mrope's positions differ from SGLang's raises, naming the
        request (``per_request`` columns each, or the batch's extend lengths when None)."""
        sglang = sglang.to(ours.device, torch.int64)
        if ours.shape != sglang.shape:
            raise MRopeError(
                f"mrope check: {tuple(ours.shape)} positions from mrope, {tuple(sglang.shape)} from SGLang"
            )
        differ = (ours != sglang).any(dim=0).nonzero()
        if not differ.numel():
            return
        column = int(differ[0, 0])
        if per_request is None:
            ends = np.cumsum(np.asarray(batch.extend_lens))
            i = int(np.searchsorted(ends, column, side="right"))
        else:
            i = column // per_request
        rid = batch.reqs[i].rid if i < len(batch.reqs) else "?"
        raise MRopeError(
            f"mrope check: request {rid!r} (slot {int(batch.req_pool_indices_cpu[i])}), column {column}: "
            f"t, h, w = {ours[:, column].tolist()} from mrope, {sglang[:, column].tolist()} from SGLang"
        )


def _image_inputs(
    family: Family, input_ids: Any, items: Any
) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """A request of images only, as :meth:`PositionTable.add` takes it: the prompt with each image's
    placeholder ids back (SGLang's scheduler holds them replaced by the image's hash values, for its
    radix cache), the grids and the offsets of SGLang's items; None for anything else (videos, an
    item of several ranges or without its grid: SGLang's stored positions serve those)."""
    grids, offsets = [], []
    for item in items:
        grid = item.model_specific_data.get("image_grid_thw") if item.is_image() else None
        if grid is None or item.offsets is None or len(item.offsets) != 1:
            return None
        grids.append(np.asarray(grid, dtype=np.int64).reshape(-1, 3))
        offsets.append(item.offsets[0])
    if not offsets:
        return None
    ids = np.array(input_ids, dtype=np.int64)
    for start, end in offsets:  # one slice per image, at admission
        ids[start : end + 1] = family.image_token_id
    return ids, np.concatenate(grids), [start for start, _ in offsets]


def _rl_on_policy() -> bool:
    """SGLang's ``rl_on_policy_target`` (text positions for every request), which mrope leaves to SGLang."""
    from sglang.srt.runtime_context import get_exec

    return get_exec().deterministic.rl_on_policy_target is not None


def runner_table(
    model_runner: Any,
    family_of: Callable[[Any], Family | None],
    count: Callable[[str], None],
    warn: Callable[[str, BaseException], None],
) -> RunnerTable | None:
    """The model runner's table, created on its first step; None where SGLang's path serves it."""
    state = model_runner.__dict__.get("_mrope_table", _MISSING)
    if state is not _MISSING:
        return state
    state = None
    try:
        family = family_of(model_runner.model_config.hf_config)
        pool = model_runner.req_to_token_pool
        if family is not None:
            generation = getattr(pool, "req_generation", None)
            if not isinstance(generation, torch.Tensor) or generation.device.type != "cpu":
                raise MRopeError("the request pool has no host generation counter (req_generation)")
            state = RunnerTable(family, pool, model_runner.device, count, warn)
    except Exception as error:
        warn("model runner", error)
    model_runner._mrope_table = state
    return state
