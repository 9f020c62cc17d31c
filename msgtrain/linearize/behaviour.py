"""The behaviour policy of a sample: the model and sampling parameters its trained turns were generated with.

Carried in the sample's ``metadata`` as ``behaviour`` when the log names any of them (a request's ``temperature``,
``top_p``, ``top_k``, a response's ``model``): ``{"model", "temperature", "top_p", "top_k"}`` with the keys the log has,
when every trained turn of the sample agrees; else ``{"per_turn": [...]}``, one entry (or null) per trained turn, in
``turn_ids`` order. Provider spellings are read as one name: ``topP`` / ``p`` as ``top_p``, ``topK`` / ``k`` as
``top_k``. Off-policy RL needs them beside the logged logprobs (an importance ratio is against the distribution the
tokens were drawn from: a temperature changes it); the ``rl`` target writes them as columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgtrain.model.message import Generation

_NAMES = {
    "temperature": ("temperature",),
    "top_p": ("top_p", "topP", "p"),
    "top_k": ("top_k", "topK", "k"),
}


def turn_behaviour(gen: Generation | None) -> dict[str, Any] | None:
    """What one generation's record says of the policy that sampled it, or None when it says nothing."""
    if gen is None:
        return None
    out: dict[str, Any] = {}
    if gen.model:
        out["model"] = gen.model
    for name, spellings in _NAMES.items():
        for key in spellings:
            value = gen.sampling.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[name] = value
                break
    return out or None


def sample_behaviour(generations: Sequence[Generation | None]) -> dict[str, Any] | None:
    """The ``behaviour`` entry of a sample whose trained turns have these generations (module docstring)."""
    turns = [turn_behaviour(g) for g in generations]
    if not any(turns):
        return None
    if all(t == turns[0] for t in turns):
        return turns[0]
    return {"per_turn": turns}
