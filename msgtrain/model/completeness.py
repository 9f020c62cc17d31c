"""Whether a graph holds everything the model was sent: its system prompt, its tool schemas and the files an agent
put into its requests.

Many logs do not record them (coding-assistant session logs keep the conversation, not the request the assistant
built around it). A sample trained on such a graph is not token-exact, whatever the tokenizer: the model saw more
than the sample holds. Readers say so here; the linearizer then flags every sample of the graph
``context_incomplete`` and the run's books count them.

Invariants:
- The mark lives in the graph's metadata under :data:`CONTEXT_INCOMPLETE` as ``{"missing": [...], "why": ...}``,
  ``missing`` a sorted subset of :data:`CONTEXT_PARTS`; marking twice merges what is missing.
- A reader marks a graph only for what its format cannot hold or did not hold in this log; where the log holds the
  part (a logged request, a results file with the policy text), the reader puts it in the context instead.
- A transcript whose assistant calls tools natively but that holds no tool schema lacks them for certain (an API
  takes native tool calls only after the tools were declared): :func:`mark_calls_without_tools`. A logged request
  is never marked so: what it sent is what the model saw.
- A reply's API-reported prompt size (:func:`reported_prompt_range`) is compared with the prompt msgtrain builds
  when the tokenizer is the model's own (:func:`same_model`): a disagreement flags the sample ``usage_mismatch``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from msgtrain.model.graph import MessageGraph, Origin

CONTEXT_INCOMPLETE = "context_incomplete"
# ``files``: the file contents and repository map an agent adds to each request (aider's chat files and repo map):
# what its log does not hold and no supplied file can stand for, since they change from request to request.
CONTEXT_PARTS = ("system_prompt", "tools", "files")
# A sampled reply's metadata key for the prompt it was sampled after, logged as the text a chat template rendered
# (``{"family", "text", "controls"}``, written by msgtrain.ingest.common.rendered_prompts): the exact context, as
# logged.
RENDERED_PROMPT = "rendered_prompt"


def mark_context_incomplete(graph: MessageGraph, missing: Iterable[str], why: str) -> None:
    """Record that ``graph`` lacks ``missing`` parts of what its model was sent, and why."""
    parts = set(missing)
    unknown = parts - set(CONTEXT_PARTS)
    if unknown:
        raise ValueError(f"unknown context parts {sorted(unknown)}; use {CONTEXT_PARTS}")
    prev = missing_context(graph)
    graph.metadata[CONTEXT_INCOMPLETE] = {"missing": sorted(parts | set(prev)), "why": why}


def mark_unlogged_context(graph: MessageGraph, why: str) -> None:
    """For a log format that does not record the request its agent built: mark ``graph`` (and the sub-agent graphs
    nested in it) for each part it does not hold — no system message on any branch, no tool schema in any
    environment."""
    from msgtrain.model.graphlog import subgraphs  # graphlog imports the graph model; this module stays light

    for g in (graph, *subgraphs(graph)):
        missing = []
        if not any(n.message.role == "system" for n in g.nodes.values()):
            missing.append("system_prompt")
        if not any(env.tools for env in g.envs.values()):
            missing.append("tools")
        if missing:
            mark_context_incomplete(g, missing, why)


UNLOGGED_TOOLS = "the conversation calls tools, but the log holds no tool schemas"


def mark_calls_without_tools(graph: MessageGraph, why: str) -> None:
    """For a transcript (not a logged request): mark ``graph`` as lacking ``tools`` when one of its messages calls a
    tool and no environment of the graph holds a tool schema."""
    calls = any(n.message.kind == "option_call" for n in graph.nodes.values())
    if calls and not any(env.tools for env in graph.envs.values()):
        mark_context_incomplete(graph, ["tools"], why)


def missing_context(graph: MessageGraph) -> list[str]:
    """The parts of the model's context ``graph`` lacks (empty when complete or unknown to be incomplete)."""
    mark: Any = graph.metadata.get(CONTEXT_INCOMPLETE)
    if not isinstance(mark, dict):
        return []
    return [p for p in mark.get("missing", []) if p in CONTEXT_PARTS]


# ------------------------------------------------------------------------------------------- reported prompt size

# A reply's ``metadata["usage"]`` as its API reported it: the keys that give the prompt's size in tokens, per
# provider, and the keys of cached prompt tokens. Whether those cached tokens are a part of the prompt count or counted
# apart from it depends on who wrote the usage, not on the key: Anthropic's API counts them apart from
# ``input_tokens``; OpenAI's ``prompt_tokens`` (and LiteLLM's, whatever the provider) holds them; Inspect follows
# its provider; OpenTelemetry's ``gen_ai.usage.input_tokens`` holds them by the conventions, not in every
# instrumentation. :func:`reported_prompt_range` therefore gives a range, exact only where the usage itself says which.
_PROMPT_KEYS = (
    "prompt_tokens",
    "input_tokens",
    "promptTokenCount",
    "prompt_token_count",
    "tokensIn",
    "inputTokens",
    "input",
)
_CACHED_KEYS = (
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "input_tokens_cache_read",
    "input_tokens_cache_write",
    "cacheReads",
    "cacheWrites",
)
_OUTPUT_KEYS = ("completion_tokens", "output_tokens", "candidatesTokenCount", "outputTokens", "tokensOut", "output")
_TOTAL_KEYS = ("total_tokens", "totalTokens", "totalTokenCount", "total")
# Keys only Anthropic's own Messages API usage carries beside its cache counts (the nested cache breakdown, the
# service tier, server tool use): a usage holding one counts its cache apart.
_ANTHROPIC_USAGE = ("cache_creation", "service_tier", "server_tool_use")


def _count(usage: dict[str, Any], key: str) -> float | None:
    value = usage.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return value
    return None


def reported_prompt_range(metadata: dict[str, Any]) -> tuple[int, int] | None:
    """The prompt size (tokens) the API reported for the call that produced a reply, as ``(low, high)``, or None
    when not logged (or not a finite positive count).

    ``low == high`` unless the usage counts cached prompt tokens under keys whose meaning it does not settle: then
    ``low`` reads them as a part of the prompt count and ``high`` as counted apart. The usage settles it when
    its count is OpenAI's ``prompt_tokens`` (cache included), when it carries Anthropic's own usage keys (cache apart),
    or when its total equals the prompt plus the output with or without the cache. A check that must not misfire
    compares ranges, never one end of them."""
    usage = metadata.get("usage")
    if not isinstance(usage, dict):
        return None
    for key in _PROMPT_KEYS:
        value = _count(usage, key)
        if value is None or value <= 0:
            continue
        cached = sum(c for k in _CACHED_KEYS if (c := _count(usage, k)) is not None)
        low, high = int(value), int(value + cached)
        if cached == 0 or key == "prompt_tokens":
            return low, low
        if any(k in usage for k in _ANTHROPIC_USAGE):
            return high, high
        total = next((t for k in _TOTAL_KEYS if (t := _count(usage, k)) is not None), None)
        output = next((o for k in _OUTPUT_KEYS if (o := _count(usage, k)) is not None), None)
        if total is not None and output is not None:
            if total == value + cached + output:
                return high, high
            if total == value + output:
                return low, low
        return low, high
    return None


def reported_reasoning_tokens(metadata: dict[str, Any]) -> int | None:
    """The reasoning tokens the API counted for a reply (OpenAI's ``completion_tokens_details`` /
    ``output_tokens_details``, Gemini's ``thoughtsTokenCount``), or None when not logged."""
    usage = metadata.get("usage")
    if not isinstance(usage, dict):
        return None
    places = [usage, usage.get("completion_tokens_details"), usage.get("output_tokens_details")]
    for place in places:
        if not isinstance(place, dict):
            continue
        for key in ("reasoning_tokens", "thoughtsTokenCount", "thoughts_token_count"):
            value = place.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def logged_call_facts(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(usage, model) a transcript logged beside one assistant message, in the places agent frameworks and
    coding assistants write them, or None for each that is not there:

    - usage: ``usage`` (OpenAI / Anthropic / pydantic-ai keys), LangChain's ``usage_metadata`` and
      ``response_metadata.token_usage`` / ``.usage`` (Haystack: ``meta.usage``, Semantic Kernel:
      ``metadata.usage``), Gemini's ``usageMetadata``, Cline's ``metrics.tokens``
      (``prompt`` counts the cached tokens too: it becomes ``prompt_tokens``);
    - model: ``model``, ``model_name``, ``modelId``, Cline's ``modelInfo.modelId``, LangChain's
      ``response_metadata.model_name``.

    Only a usage that names a prompt size (:func:`reported_prompt_range`) is returned."""
    if not isinstance(raw, dict):
        return None, None
    meta: dict[str, Any] = raw["response_metadata"] if isinstance(raw.get("response_metadata"), dict) else {}
    for key in ("meta", "metadata"):  # Haystack's ChatMessage meta, Semantic Kernel's message metadata
        if not meta and isinstance(raw.get(key), dict):
            meta = raw[key]
    candidates: list[Any] = [
        raw.get("usage"),
        raw.get("usage_metadata"),
        raw.get("usageMetadata"),
        meta.get("token_usage"),
        meta.get("usage"),
    ]
    metrics = raw.get("metrics")
    tokens = metrics.get("tokens") if isinstance(metrics, dict) else None
    if isinstance(tokens, dict) and isinstance(tokens.get("prompt"), int | float):
        candidates.append({"prompt_tokens": tokens["prompt"]})
    usage = next((u for u in candidates if isinstance(u, dict) and reported_prompt_range({"usage": u})), None)
    info: dict[str, Any] = raw["modelInfo"] if isinstance(raw.get("modelInfo"), dict) else {}
    names = (
        raw.get("model"),
        raw.get("model_name"),
        raw.get("modelId"),
        info.get("modelId"),
        meta.get("model_name"),
        meta.get("model"),
    )
    model = next((n for n in names if isinstance(n, str) and n), None)
    return usage, model


def same_model(tokenizer_name: str, model: str | None) -> bool:
    """Whether a tokenizer (its name or folder) is the model's own: their base names, lower-cased and stripped of
    everything but letters and digits, are equal or one starts the other with at least :data:`_MIN_NAME` characters
    (``/models/Qwen3-8B`` and ``Qwen/Qwen3-8B``, ``qwen3-8b`` or ``Qwen3-8B-Instruct``). Only then can a reported
    prompt size be compared with the tokens msgtrain builds."""
    if not model or not tokenizer_name:
        return False

    def base(name: str) -> str:
        tail = name.rstrip("/").rsplit("/", 1)[-1]
        return "".join(c for c in tail.lower() if c.isalnum())

    a, b = sorted((base(tokenizer_name), base(model)), key=len)
    return bool(a) and (a == b or (len(a) >= _MIN_NAME and b.startswith(a)))


_MIN_NAME = 6


# ------------------------------------------------------------------------------------- a prompt that shrank

# A later reply's reported prompt smaller than an earlier one's by more than this (tokens, share of the earlier size:
# whichever is larger) says the history sent was cut: a count that only wobbles (a date, a counted generation prompt)
# stays within it.
SHRINK_TOLERANCE = (16, 0.02)
SHRUNK_PROMPT = "prompt_shrank"  # graph metadata: {node id: why}, for inspect and the tests
_SHRUNK_WHY = (
    "the API reported a prompt of {now} tokens for this reply, {fewer} fewer than for an earlier reply of the same "
    "model whose context this one's extends ({before}): the history sent was cut or compacted and the log does not "
    "say how, so this reply and the ones after it were sampled in a context the log does not hold"
)


def carry_replies_after_shrunk_prompt(graph: MessageGraph) -> int:
    """Keep as context (``carried``, with ``why_not_trained``) every sampled reply whose context the log shows
    wrongly because the prompt its API reported is smaller than an earlier reply's on its path
    (:func:`reported_prompt_range`: where the usage leaves the cache's share open, even its largest reading must be
    below the earlier smallest): a reply's context extends every earlier reply's context plus that reply, so its
    prompt cannot be smaller unless what was sent was cut (a sliding window, a truncation, an unlogged compaction,
    tool results the API cleared). That reply and every later reply below it are then in a context the log does not
    hold.

    Compared only where the earlier prompt is contained in the later one whatever the serving side did: the same
    model (one tokenizer) and environment (the same tools), and not across a user message when reasoning that
    APIs and chat templates drop once a new user turn starts (Anthropic's earlier thinking, Qwen3's
    ``reasoning_content``) was in the earlier prompt. A log that records its cut (a compaction summary, a rewind)
    puts the later replies on another branch, where no comparison is made; a reply carried onto such a branch (a
    summary, a kept tail) reported the prompt of the context it was sampled in, so only sampled replies' prompts are
    compared. Returns how many replies it carried."""
    if not any(isinstance(node.message.metadata.get("usage"), dict) for node in graph.nodes.values()):
        return 0  # no reply reports a prompt size (most logs): nothing to compare, no walk in depth order
    carried = 0
    # per node: (the largest comparable earlier prompts {(model, env): (tokens, node)} safe across user turns, those
    # of the open tool loop, whether the open loop holds reasoning, the taint)
    State = tuple[dict[tuple[str | None, str], int], dict[tuple[str | None, str], int], bool, str | None]
    states: dict[str | None, State] = {None: ({}, {}, False, None)}
    # parents before children whatever order the nodes were added in (a reader may add a branch's nodes late)
    for node in sorted(graph.nodes.values(), key=lambda n: n.depth):
        nid = node.id
        if node.parent not in states:
            continue  # a node whose parent is not in the graph: no path to compare along
        safe, loop, reasoning, taint = states[node.parent]
        message = node.message
        if message.role == "user":
            loop, reasoning = {}, False
        elif node.is_assistant:
            # only a reply sampled here reported this path's prompt: a carried copy's usage is its first context's
            found = reported_prompt_range(message.metadata) if node.origin is Origin.SAMPLED else None
            if found is not None and taint is None:
                low, reported = found  # shrunk only if even the largest reading is below the earlier smallest
                generation = graph.generation(nid) or message.generation
                key = (generation.model if generation is not None else None, node.env_id)
                before = max(safe.get(key, 0), loop.get(key, 0))
                tokens, share = SHRINK_TOLERANCE
                if before - reported > max(tokens, share * before):
                    taint = _SHRUNK_WHY.format(now=reported, fewer=before - reported, before=before)
                elif low > before:
                    if reasoning:
                        loop = {**loop, key: low}
                    else:
                        safe = {**safe, key: max(safe.get(key, 0), low)}
            if taint is not None and node.origin is Origin.SAMPLED:
                update = {"metadata": {**message.metadata, "why_not_trained": taint}}
                graph.nodes[nid] = replace(node, origin=Origin.CARRIED, message=message.model_copy(update=update))
                graph.metadata.setdefault(SHRUNK_PROMPT, {})[nid] = taint
                carried += 1
            if any(getattr(p, "kind", None) == "reasoning" for p in getattr(message, "parts", ())):
                reasoning = True
        states[nid] = (safe, loop, reasoning, taint)
    return carried
