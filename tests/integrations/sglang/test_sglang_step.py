"""The step half of the integration against SGLang's own ``ForwardBatch`` methods, without an engine:
extend (chunks ending inside images and videos, prefixes from the radix cache), decode and speculative
positions of the same batch, on the host path and on the torch (device) path, slot reuse, refusal, and
check mode's message. SGLang's methods run unbound on stand-in batches holding what they read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.integrations._sglang_step import PACKED_ATTRIBUTE, RunnerTable  # noqa: E402
from mrope.serving import PackedPrompt  # noqa: E402
from support import tiny_vlms as tiny  # noqa: E402
from support.sglang_step import step_batch  # noqa: E402
from support.tiny_vlms import Image, Video  # noqa: E402

TEXT = [5, 6, 7]
PROMPTS = [
    [TEXT * 4, Image(3, 5), TEXT],
    [TEXT, Video(4, 2, 2, seconds=2.0), TEXT * 2],
    [TEXT * 5],
    [TEXT, Image(2, 3), [9] * 10, Video(3, 4, 6, seconds=0.7), TEXT, Image(1, 1)],
]
SLOTS = [3, 1, 7, 2]


def _requests(packed: bool = False) -> tuple[Any, list[Any], list[Any]]:
    """The family, SGLang's requests and their multimodal inputs (positions from SGLang's own function;
    ``packed``: each also carries them packed, as the tokenizer process ships a prompt mrope serves)."""
    from sglang.srt.layers.rotary_embedding.mrope_rope_index import get_rope_index

    config = tiny.tiny_config("qwen2_5_vl", vision={"tokens_per_second": 2})
    reqs, mms = [], []
    for i, parts in enumerate(PROMPTS):
        ids, images, videos, seconds, _ = tiny.layout("qwen2_5_vl", config, parts)
        reqs.append(SimpleNamespace(rid=f"r{i}", session=None, origin_input_ids=ids))
        if not images and not videos:
            mms.append(None)
            continue
        positions, delta = get_rope_index(
            config.vision_config.spatial_merge_size,
            config.image_token_id,
            config.video_token_id,
            config.vision_start_token_id,
            "qwen2_5_vl",
            2,
            torch.tensor([ids]),
            torch.tensor(images) if images else None,
            torch.tensor(videos) if videos else None,
            torch.tensor(seconds) if seconds else None,
        )
        mm = SimpleNamespace(
            mm_items=[],  # no items: registered from the stored positions (or the packed prompt)
            mrope_positions=positions[:, 0],
            mrope_position_delta=delta,
            mrope_position_delta_repeated_cache=None,
        )
        if packed:
            vars(mm)[PACKED_ATTRIBUTE] = PackedPrompt.from_positions(positions[:, 0], int(delta))
        mms.append(mm)
    return mrope.from_config(config), reqs, mms


def _table(family: Any, host: bool, counts: dict[str, int]) -> tuple[RunnerTable, Any]:
    pool = SimpleNamespace(req_generation=torch.zeros(9, dtype=torch.int64))
    pool.req_generation[SLOTS] = 1

    def count(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    return RunnerTable(family, pool, "cpu", count, lambda kind, error: None, host=host), pool


@pytest.mark.parametrize("packed", [False, True], ids=["stored", "packed"])
@pytest.mark.parametrize("host", [True, False], ids=["host", "torch"])
def test_steps_are_sglangs(sglang_exec: None, host: bool, packed: bool) -> None:
    """Requests registered from SGLang's stored positions, or from the packed prompts the tokenizer
    process ships (the text-only one from its length either way): every step is SGLang's."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    family, reqs, mms = _requests(packed)
    lengths = [len(r.origin_input_ids) for r in reqs]
    counts: dict[str, int] = {}
    table, _ = _table(family, host, counts)
    runner = SimpleNamespace(device="cpu")
    # a first chunk of each prompt (ending inside the image or the video), then the rest
    for prefix in ([0] * 4, [17, 9, 0, 23]):
        extend = [n - p if p else min(n, 20) for n, p in zip(lengths, prefix, strict=True)]
        batch, fb = step_batch(reqs, mms, SLOTS, prefix, extend)
        assert table.serves(batch)
        ForwardBatch._compute_mrope_positions_extend(fb, runner, batch)
        assert torch.equal(table.extend(fb, batch), fb.mrope_positions)
    assert counts == (
        {"admitted": 4, "from_packed": 4}
        if packed
        else {"admitted": 4, "from_positions": 3, "from_packed": 1}
    )
    batch, fb = step_batch(reqs, mms, SLOTS, lengths, [5, 1, 2, 9])  # decode at seq_len - 1 past the prompt
    ForwardBatch._compute_mrope_positions_decode(fb, runner, batch)
    assert torch.equal(table.decode(fb, batch), fb.mrope_positions)
    drafts = (torch.tensor(lengths) + 3)[:, None] + torch.arange(4)  # 4 draft tokens per request
    ForwardBatch.compute_spec_mrope_positions(fb, runner, batch, drafts.reshape(-1))
    assert torch.equal(table.speculative(fb, batch, drafts.reshape(-1)), fb.mrope_positions)


def test_reused_and_refused_slots(sglang_exec: None) -> None:
    family, reqs, mms = _requests()
    counts: dict[str, int] = {}
    table, pool = _table(family, True, counts)
    lengths = [len(r.origin_input_ids) for r in reqs]
    batch, fb = step_batch(reqs, mms, SLOTS, [0] * 4, lengths)
    assert table.serves(batch)
    # slot 3's request ended; the text-only request takes it (a new generation of the slot)
    pool.req_generation[3] += 1
    batch, fb = step_batch([reqs[2]], [None], [3], [0], [lengths[2]])
    assert table.serves(batch) and counts["reused_slots"] == 1
    assert torch.equal(table.extend(fb, batch), torch.arange(lengths[2]).repeat(3, 1))
    # a session request is refused: its batches take SGLang's path
    pool.req_generation[1] += 1
    session = SimpleNamespace(**{**vars(reqs[0]), "session": object()})
    batch, _ = step_batch([session, reqs[3]], [mms[0], mms[3]], [1, 2], [0, 0], [4, 4])
    assert not table.serves(batch) and counts["fallback_requests"] == 1


def test_check_mode_names_the_request(sglang_exec: None) -> None:
    family, reqs, mms = _requests()
    table, _ = _table(family, True, {})
    lengths = [len(r.origin_input_ids) for r in reqs]
    batch, fb = step_batch(reqs, mms, SLOTS, [0] * 4, lengths)
    assert table.serves(batch)
    ours = table.extend(fb, batch)
    wrong = ours.clone()
    column = lengths[0] + 6  # inside the second request's video
    wrong[1, column] += 1
    with pytest.raises(MRopeError, match=rf"request 'r1' \(slot 1\), column {column}: t, h, w = "):
        RunnerTable.compare(ours, wrong, batch, None)
