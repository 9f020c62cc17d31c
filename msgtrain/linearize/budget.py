"""Per-graph caps on what linearizing one graph may produce: tokens, samples and state bytes.

One conversation can produce far more than its size: a template that re-renders the history at every user message
(Qwen3 drops earlier reasoning) cuts there, and every sample holds its whole context again, so a 616 KB session of
1,200 turns gave 69 M tokens and 3.3 GB of memory. The caps make a worker's memory bounded by construction: a graph
past one is rejected with its own reason (``graph_too_many_tokens``, ``graph_too_many_samples``,
``graph_state_too_large``) as soon as it passes it, before the rest of it is rendered.

Invariants:
- What is counted is exactly what the graph's samples will be: one sample per leaf of the prefix tree, each the
  leaf turn's whole token sequence. A turn that extends its parent replaces the parent as a leaf and adds its own
  tokens minus its parent's (never fewer: it starts with them), so the running counts only grow and a graph is
  rejected the moment its final output would pass a cap — never one whose output stays within the caps.
- State bytes estimate the part's uncompressed rows: :data:`BYTES_PER_TOKEN` per token (int32 id, int8 loss mask,
  float32 logprob) plus :data:`BYTES_PER_SAMPLE` and the graph's metadata per sample.
- ``None`` turns a cap off.
"""

from __future__ import annotations

from msgtrain.errors import MsgtrainError
from msgtrain.limits import DEFAULT_MAX_GRAPH_SAMPLES, DEFAULT_MAX_GRAPH_STATE_BYTES, DEFAULT_MAX_GRAPH_TOKENS

__all__ = ["DEFAULT_MAX_GRAPH_SAMPLES", "DEFAULT_MAX_GRAPH_STATE_BYTES", "DEFAULT_MAX_GRAPH_TOKENS", "GraphBudget"]
BYTES_PER_TOKEN = 4 + 1 + 4
BYTES_PER_SAMPLE = 256  # ids, spans, group ids, policy, source, flags of one row


class GraphBudget:
    """The running size of one graph's samples while its turns are tokenized (see the module docstring)."""

    def __init__(
        self,
        graph_id: str,
        max_tokens: int | None,
        max_samples: int | None,
        max_state_bytes: int | None,
        metadata_bytes: int = 0,
    ) -> None:
        self.graph_id = graph_id
        self.max_tokens = max_tokens
        self.max_samples = max_samples
        self.max_state_bytes = max_state_bytes
        self.per_sample = BYTES_PER_SAMPLE + metadata_bytes
        self.tokens = 0  # tokens of the samples so far: the leaves' token counts
        self.leaves: dict[str, int] = {}  # leaf turn → its token count

    @property
    def state_bytes(self) -> int:
        return self.tokens * BYTES_PER_TOKEN + len(self.leaves) * self.per_sample

    def add(self, turn: str, tokens: int, parent: str | None) -> None:
        """Count turn ``turn`` (``tokens`` long, extending ``parent``); raise the reject past a cap."""
        if parent is not None and parent in self.leaves:
            self.tokens -= self.leaves.pop(parent)
        self.leaves[turn] = tokens
        self.tokens += tokens
        if self.max_tokens is not None and self.tokens > self.max_tokens:
            raise self._error(
                "graph_too_many_tokens", f"{self.tokens:,} tokens", f"{self.max_tokens:,}", "--max-graph-tokens"
            )
        if self.max_samples is not None and len(self.leaves) > self.max_samples:
            count = f"{len(self.leaves):,} samples"
            raise self._error("graph_too_many_samples", count, f"{self.max_samples:,}", "--max-graph-samples")
        if self.max_state_bytes is not None and self.state_bytes > self.max_state_bytes:
            raise self._error(
                "graph_state_too_large",
                f"about {self.state_bytes / 2**20:,.0f} MiB of rows",
                f"{self.max_state_bytes / 2**20:,.0f} MiB",
                "--max-graph-state-mb",
            )

    def _error(self, code: str, amount: str, cap: str, option: str) -> MsgtrainError:
        return MsgtrainError(
            f"graph {self.graph_id} gives at least {amount} in its samples, above the cap of {cap}",
            code=code,
            hint=f"raise {option} (a worker's memory grows with it) or split the conversation; a template that"
            " re-renders the history cuts at each user message, and each sample then repeats the whole context",
        )
