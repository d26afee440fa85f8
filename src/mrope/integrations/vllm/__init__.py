"""mrope inside vLLM: the M-RoPE positions of vLLM's model runners served by a :class:`mrope.PositionTable`.

vLLM computes a request's (num_dims, P) prompt positions at admission with a per-model Python function.
Its V1 runner (vLLM 0.32 and 0.33) then loops over the batch in Python every step to copy them (and
``index + delta`` past the prompt) into its position buffer; Model Runner V2 (the default on GPUs) keeps
them in a ``(max_num_reqs * num_dims, max_model_len)`` pinned buffer (GBs) read by a Triton kernel;
vLLM 0.34's CPU runner keeps the same dense buffer on the host and writes each step with a C++ op.
:func:`enable` acts on whichever of them vLLM builds, in this process:

- V1 (:mod:`.v1`): admission becomes ``PositionTable.add``, each step one ``fill``, the persistent
  batch's moves keep the map from batch index to table slot current.
- V2 on GPUs and vLLM 0.34's CPU runner (:mod:`.v2`): the ``RopeState`` its ``get_rope_state`` builds
  is replaced by :class:`~.v2.TableRopeState`: no per-token buffer, admission from the ids and the
  features' offsets (:mod:`.features`), each step one :meth:`PositionTable.fill_ragged` from the
  runner's tensors (one Triton launch on a GPU; the compiled or numpy step on the host); video token
  pruning's read renders from the table and its update registers the recomputed positions.

Each runner is accepted by what was audited, not by a version string (:mod:`.audit`): the source of
everything of vLLM's the integration patches, replaces or relies on is digested and must equal an
audited release's, per runner; each model's own position code is checked the same way when a runner
serves it by mrope's rule (:mod:`.models`).

*Positions mode*: a model mrope has no rule for, or does not serve the way vLLM does, or whose vLLM
position code was not audited, is still served from a table: each request's prompt positions are the
ones vLLM's own function computes at admission, registered with :meth:`PositionTable.add_positions`,
and every step is the table's. Logged once per runner, counted in ``positions_runners`` and
``positions_requests``.

What falls back to vLLM's own path (logged once, counted in :func:`stats`): a model with other than 3
position rows; video token pruning in the V1 runner; a request whose positions the table cannot hold
(mrope's rule refused: vLLM's positions are registered instead; where even that fails the runner hands
every request to vLLM's path for good). The engine never fails because of the integration, check mode
aside.

``mode="check"`` runs vLLM's own code too and compares every step (and pruning's reads), raising
:class:`MRopeError` at the first differing column: a way to validate a model or a vLLM release before
serving with mrope.
"""

from .lifecycle import (
    AUDITED_RELEASES,
    ENV_VAR,
    disable,
    enable,
    guard_engine_start,
    is_enabled,
    register,
    reset_stats,
    stats,
)
from .state import MODES

__all__ = [
    "AUDITED_RELEASES",
    "ENV_VAR",
    "MODES",
    "disable",
    "enable",
    "guard_engine_start",
    "is_enabled",
    "register",
    "reset_stats",
    "stats",
]
