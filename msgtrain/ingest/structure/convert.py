"""One found conversation → its graph, layout by layout (messages, prompt / completion, alpaca, preference).

Invariants:
- Only the replies the layout says were sampled are trained: a prompt's assistant messages are context
  (``injected``); a preference pair's rejected side is marked so; n text samples of one context are siblings; a
  reply a conversation opens with before any input is the application's text (``injected``, :func:`scripted_opening`).
- A prompt that is the text a chat template rendered is parsed back into its messages, and the replies keep the
  logged text as their exact prompt.
- Anything ambiguous raises a :class:`~msgtrain.errors.ValidationError` naming the JSON path (the reader turns it
  into the conversation's reject); assistant messages beside the conversation that it does not read are an
  ambiguity, never silently dropped.
- Context the record holds is the graph's: a system prompt and tools (:mod:`~msgtrain.ingest.structure.context`), and
  ``chat_template_kwargs`` beside the messages as the template arguments the conversation is rendered with.
- Deterministic: the graph id is the record's place plus a digest of the graph's leaves, the same on every rerun.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.content_parts import bare_calls
from msgtrain.ingest.common.conversation_files import (
    Step,
    append_steps,
    base_graph_id,
    check_pairing,
    content_graph_id,
    logged_finish,
    mark_last_reply,
)
from msgtrain.ingest.common.media_columns import MediaColumns, media_beside, media_beside_error
from msgtrain.ingest.common.message_like import (
    THREAD_WITHOUT_REQUEST,
    is_message_list,
    message_like_count,
    named_agents,
    named_agents_error,
    said,
    thread_without_request,
)
from msgtrain.ingest.common.rendered_prompts import (
    RENDERED_PROMPT_KEY,
    RenderedPrompt,
    continued_conversation,
    parse_rendered_prompt,
)
from msgtrain.ingest.common.shapes import MessageNormaliser, parse_transcript
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.common.turn_pieces import unlogged_context
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadSkip, SourceRef
from msgtrain.ingest.structure.context import (
    base_system_at,
    inherited_tools,
    mark_ui_export,
    text_blocks,
    with_system,
)
from msgtrain.ingest.structure.found import (
    NO_USER_MARKERS,
    SAMPLE_LISTS,
    Found,
    assistant_like,
    choice_messages,
    is_prefix,
    sample_text,
    text_samples,
)
from msgtrain.ingest.structure.mapping import Mapping, dig, top_fields
from msgtrain.ingest.structure.node_maps import node_map_graph
from msgtrain.ingest.structure.steps import (
    Gap,
    StepBuilder,
    check_speakers,
    forked,
    gap_reject,
    need_list,
    row_extras,
    scripted_opening,
)
from msgtrain.ingest.structure.trees import tree_events
from msgtrain.model.completeness import UNLOGGED_TOOLS, mark_calls_without_tools, mark_context_incomplete
from msgtrain.model.graph import HISTORY_COPY, ROLLOUT_GROUP, MessageGraph, Origin
from msgtrain.model.message import PartsMessage, TextPart

TEMPLATE_KWARGS_KEY = "chat_template_kwargs"
# Objects that hold a request an API was sent (OpenAI bodies, NeMo Gym's responses_create_params, google-genai's
# model_request, the HTTP ``body`` a client logged beside its ``headers``, as chat-ui's llm-logs do): a message list
# found in one, with no response beside it, is what was sent; its assistant messages are history the caller wrote or
# replayed, no reply of the model's.
REQUEST_KEYS = frozenset(
    {"request", "request_body", "body", "responses_create_params", "create_params", "model_request", "llm_request"}
)
REQUEST_ONLY = "a request logged without its response: its messages are what was sent, and no reply was sampled"


def convert_found(path: Path, ref: SourceRef, found: Found) -> list[ReadEvent]:
    """One conversation → a graph (raises :class:`ValidationError` naming the JSON path on anything ambiguous)."""
    if found.node_map:
        return node_map_graph(path, ref, found.holder, found.mapping.columns["messages"], found.path)
    if "children" in found.mapping.columns or "parent" in found.mapping.columns:
        return tree_events(path, ref, found)
    m, holder, at = found.mapping, found.holder, found.path
    if m.layout == "messages" and at.rsplit(".", 1)[-1] in REQUEST_KEYS:
        return [ReadSkip(ref, REQUEST_ONLY)]
    norm = MessageNormaliser(roles=m.roles or None, role_key=m.role_key, content_key=m.content_key)
    builder = StepBuilder(norm)
    system = m.field_of(holder, "system")
    inherited_system = found.inherited.get("system", (None, None))[1] if system is None else None
    system = text_blocks(system) if isinstance(system, list) else system
    if system is not None and not isinstance(system, str):
        raise ValidationError(
            f"the system prompt at {at}.{m.columns.get('system', '(an enclosing object) system')} is not text",
            code="bad_content",
        )
    label = _label(m, holder, at)
    branches: list[tuple[list[Step], str]] = []
    gap: Gap | None = None
    if m.layout == "messages":
        messages = m.field_of(holder, "messages")
        need_list(messages, f"{at}.{m.columns['messages']}")
        if not m.roles and not m.role_key and (agents := named_agents(messages)):
            # An AutoGen chat among named agents: which speaker is the model is the user's to say, in a mapping
            # that names it (the structural reader's own search refuses it the same way, in locate).
            raise named_agents_error(agents, f"{at}.{m.columns['messages']}")
        gap = builder.add_until_gap(messages, f"{at}.{m.columns['messages']}")
        mark_last_reply(builder.steps, label)
    elif m.layout == "prompt_completion":
        _check_no_media_beside(holder, m.columns["prompt"], at)
        prompt, completion = m.field_of(holder, "prompt"), _json_response(m.field_of(holder, "completion"))
        continued = continued_conversation(prompt, completion)
        rendered = _prompt_steps(builder, prompt, f"{at}.{m.columns['prompt']}")
        start = len(builder.steps)
        if continued is not None and rendered is not None:  # replies and the responses between them, decoded as one
            # the earlier replies were sampled after the prompt and the turns before them: trained as such, the
            # responses between them context; the last reply keeps the text it was sampled after (all of it)
            between, completion = continued
            said = f"{at}.{m.columns['completion']}"
            builder.add_list(between.messages[len(rendered.messages) :], said, trained=True)
            rendered = between
        meta = _reply_metadata({"label": label} if label is not None else None, rendered)
        if text_samples(completion):
            completion = [sample_text(v) for v in completion]
        completion = _logged_reply_text(completion, rendered)
        calls = bare_calls(completion) if m.field_of(holder, "tools") is not None else None
        if calls is not None:  # the calls it makes and nothing else, beside the tools it was offered
            completion = {"role": "assistant", "content": None, "tool_calls": calls}
        if text_samples(completion) and len(completion) > 1:  # n samples of one context: sibling replies
            branches = _text_branches(builder, completion, f"{at}.{m.columns['completion']}", meta)
        else:
            completion = completion[0] if text_samples(completion) else completion
            finish = logged_finish(holder) if isinstance(completion, str) else None
            if finish is not None:  # why the engine stopped its one text, logged beside it (SkyRL's stop_reason)
                completion = {"role": "assistant", "content": completion, "finish_reason": finish}
            gap = _add_replies(builder, completion, f"{at}.{m.columns['completion']}", meta)
        if not branches and not any(s.message.role == "assistant" for s in builder.steps[start:]):
            raise ValidationError(
                f"the completion at {at}.{m.columns['completion']} holds no assistant message",
                code="ambiguous_structure",
            )
        previous = dig(holder, m.columns["prompt"].rpartition(".")[0] + ".previous_response_id")
        if isinstance(previous, str) and previous and not branches:
            builder.steps[start:] = [_unknown_context(s, previous) for s in builder.steps[start:]]
    elif m.layout == "alpaca":
        _alpaca(builder, holder, m, at)
        mark_last_reply(builder.steps, label)
    else:
        branches = _preference(builder, holder, m, at, found.marks)
    check_speakers(norm, at)
    _check_nothing_beside(holder, m, at)
    steps = MediaColumns(holder).place(builder.steps)
    if inherited_system is not None and not any(s.message.role == "system" for s in steps):
        system = inherited_system  # an enclosing object's system prompt, for a conversation that holds none
    steps = with_system(steps, system, at, m)
    if m.layout == "messages":
        _check_prompt_logged(steps, f"{at}.{m.columns['messages']}")
        steps = scripted_opening(steps)
        steps = _group_history(steps, found.history_replies)
    tools_value, tools_at = m.field_of(holder, "tools"), f"{at}.{m.columns.get('tools', 'tools')}"
    if tools_value is None and "tools" in found.inherited:
        tools_at, tools_value = inherited_tools(found)
    tools = openai_tools(tools_value, where=tools_at)
    base = base_graph_id(path, ref) + ("" if at == "$" else f"@{at[2:]}")
    check_pairing(steps + [s for b, _ in branches for s in b])
    kwargs = _template_kwargs(holder, at)
    graph = MessageGraph(
        graph_id=base,
        tools=tools,
        template_kwargs=kwargs,
        metadata={"source_format": "structural", "layout": m.layout},
    )
    ids = append_steps(graph, steps) if not branches else [graph.append(s.message, origin=s.origin) for s in steps]
    if m.layout == "alpaca" and "prompt" not in m.columns:
        _add_row_versions(graph, [i for i, s in zip(ids, steps, strict=True) if s.message.role == "assistant"], holder)
    for branch, _ in branches:
        parent = ids[-1] if ids else None
        for s in branch:
            parent = graph.add_node(parent, s.message, origin=s.origin)
    if norm.user_tool_messages:  # the user side's own tool calls and results, left out of the policy's context
        graph.metadata["user_tool_messages"] = norm.user_tool_messages
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    if m.layout == "messages":
        mark_ui_export(graph, m.field_of(holder, "messages"))
        listed = m.field_of(holder, "messages")
        unlogged = unlogged_context(listed) or (THREAD_WITHOUT_REQUEST if thread_without_request(listed) else None)
        if unlogged is not None and not any(s.message.role == "system" for s in steps):
            mark_context_incomplete(graph, ["system_prompt", "tools"], unlogged)
    if found.unlogged_system and not any(s.message.role == "system" for s in steps):
        mark_context_incomplete(graph, ["system_prompt"], "the record does not save its agent's system message")
    elif base_system_at(found, m, holder, at) and not any(s.message.role == "system" for s in steps):
        where = base_system_at(found, m, holder, at)
        why = f"the log holds the agent's base system prompt ({where}), not the one its framework sent with each call"
        mark_context_incomplete(graph, ["system_prompt"], why)
    graph.graph_id = content_graph_id(base, graph)
    extras = row_extras(holder, m)
    if found.group is not None:  # one of the rollouts sampled from one context: they share their group, a row key
        graph.metadata[ROLLOUT_GROUP] = extras.setdefault(ROLLOUT_GROUP, _rollout_group(path, ref, found))
    if found.reward is not None and "reward" not in extras:
        extras["reward"] = found.reward  # the score a list beside the conversation's list gives it
    if kwargs is not None:
        del extras[TEMPLATE_KWARGS_KEY]  # read into the graph's environment, not a fact about the rows
    out: list[ReadEvent] = [ReadGraph(graph, ref, records=1, extras=extras)]
    if gap is not None:
        out.append(gap_reject(ref, gap))
    return out


def _rollout_group(path: Path, ref: SourceRef, found: Found) -> str:
    """The id of the group of rollouts ``found`` is one of: its record (``ref`` less the path of ``found`` in it, which
    a record of several conversations adds) and the path of the list that holds the rollouts."""
    record = "file" if ref.record == found.path else ref.record.removesuffix(f" {found.path}")
    group = found.group or "$"
    return base_graph_id(path, SourceRef(ref.file, record)) + ("" if group == "$" else f"@{group[2:]}")


def _check_no_media_beside(holder: dict[str, Any], prompt_key: str, at: str) -> None:
    """Refuse a logged request that carries media outside its messages (:func:`media_beside`)."""
    request_key, _, messages_key = prompt_key.rpartition(".")
    request = dig(holder, request_key) if request_key else None
    where = media_beside(request, messages_key) if isinstance(request, dict) else None
    if where is not None:
        raise media_beside_error(f"{at}.{request_key}.{where}")


def _check_prompt_logged(steps: list[Step], where: str) -> None:
    """Refuse a conversation of replies and tool results alone, opened by a reply (an agent's rollout that logs what
    the model returned, not the prompt and task its harness sent first): each reply was sampled after messages the
    record does not hold. A conversation with a user or system message anywhere is read (a greeting may open it)."""
    if any(s.message.role not in ("assistant", "tool") for s in steps):
        return
    for step in steps[:1]:
        if step.message.role == "assistant" and (step.origin is None or step.origin is Origin.SAMPLED):
            raise ValidationError(
                f"the first reply in {where} has no message before it: the prompt it was sampled after (the "
                "harness's system prompt and task) is not in the record",
                code="no_prompt",
                hint="log the request's messages beside the replies (or convert the log that holds them)",
            )


def _group_history(steps: list[Step], replies: int) -> list[Step]:
    """``steps`` with their first ``replies`` replies kept as context (``carried``): the history every rollout of the
    conversation's scored group was started from (:func:`~msgtrain.ingest.structure.found.group_history`), sampled
    before the group, never by this rollout."""
    out = list(steps)
    for i, step in enumerate(out):
        if replies <= 0:
            break
        if step.message.role == "assistant":
            replies -= 1
            if step.origin in (None, Origin.SAMPLED):
                why = "history every rollout of its scored group was started from: sampled before the group, not by it"
                metadata = {**step.message.metadata, "why_not_trained": why, HISTORY_COPY: True}
                out[i] = Step(step.message.model_copy(update={"metadata": metadata}), Origin.CARRIED, None, step.index)
    return out


def _template_kwargs(holder: dict[str, Any], at: str) -> dict[str, Any] | None:
    """The chat template arguments the conversation was rendered with (``chat_template_kwargs`` beside the messages,
    as vLLM and SGLang requests send ``enable_thinking``...): the graph's, so it is rendered as the model saw it."""
    kwargs = holder.get(TEMPLATE_KWARGS_KEY)
    if kwargs is None:
        return None
    if not isinstance(kwargs, dict):
        raise ValidationError(
            f"{at}.{TEMPLATE_KWARGS_KEY} is a {type(kwargs).__name__}, not an object",
            code="bad_record",
            hint='chat_template_kwargs names template arguments, e.g. {"enable_thinking": false}',
        )
    return kwargs


def _as_prompt(value: Any) -> Any:
    return {"role": "user", "content": value} if isinstance(value, str) else value


def _prompt_steps(builder: StepBuilder, value: Any, where: str) -> RenderedPrompt | None:
    """A prompt's messages into ``builder`` as context: a text a chat template rendered is parsed back into its
    messages (:mod:`msgtrain.ingest.common.rendered_prompts`; returned, so the replies keep the logged text), any other
    text is one user message."""
    rendered = parse_rendered_prompt(value)
    chat = _json_chat(value) if rendered is None else None
    builder.add_list(rendered.messages if rendered is not None else chat or _as_prompt(value), where, trained=False)
    return rendered


def _json_chat(value: Any) -> list[Any] | None:
    """A prompt logged as the JSON text of a message list (promptfoo's ``prompt.raw`` of a chat prompt): the list."""
    if not isinstance(value, str) or not value.lstrip().startswith("["):
        return None
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return decoded if is_message_list(decoded) else None


def _json_response(value: Any) -> Any:
    """A completion logged as the JSON text of a response body (LiteLLM's spend logs exported from their table:
    ``response`` the ChatCompletion's JSON, beside ``messages``): that body, read as a response is
    (:func:`~msgtrain.ingest.structure.found.choice_messages`); any other text is the reply it is."""
    if not isinstance(value, str) or not value.lstrip().startswith("{"):
        return value
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return decoded if isinstance(decoded, dict) and choice_messages(decoded) is not None else value


def _reply_metadata(metadata: dict[str, Any] | None, rendered: RenderedPrompt | None) -> dict[str, Any] | None:
    """A reply's metadata, with the rendered prompt it was sampled after (the exact context, as logged)."""
    if rendered is None:
        return metadata
    return {**(metadata or {}), RENDERED_PROMPT_KEY: rendered.metadata()}


def _logged_reply_text(value: Any, rendered: RenderedPrompt | None) -> Any:
    """Replies logged as text after a rendered prompt, without the stop token the engine left at their end."""
    if rendered is None:
        return value
    if isinstance(value, str):
        return rendered.reply_text(value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [rendered.reply_text(v) for v in value]
    return value


def _unknown_context(step: Step, previous: str) -> Step:
    """A reply of a Responses call that continues ``previous_response_id`` (the history is the earlier response's,
    which the API holds and this record does not): kept as context and counted, never trained after the new input
    alone (the openai_responses reader rebuilds such chains from ``{request, response}`` records)."""
    if step.message.role != "assistant":
        return step
    why = (
        f"its call continues the response {previous!r} (previous_response_id), whose history this record does not "
        "hold: the context the model saw is unknown here"
    )
    message = step.message.model_copy(update={"metadata": {**step.message.metadata, "why_not_trained": why}})
    return Step(message, Origin.CARRIED, step.generation, step.index)


def _add_replies(builder: StepBuilder, value: Any, where: str, metadata: dict[str, Any] | None) -> Gap | None:
    """The replies of a completion; a list of several (an agent's output: replies, calls, their results) cut at
    its first message that cannot be read (a :class:`Gap`), as a conversation is."""
    if isinstance(value, list) and len(value) > 1 and not metadata:
        return builder.add_until_gap(value, where)
    if isinstance(value, str):
        value = {"role": "assistant", "content": value}
    elif isinstance(value, dict) and (choices := choice_messages(value)) is not None:
        if len(choices) > 1:  # n > 1 samples of one context: siblings, which one list cannot say
            raise ValidationError(
                f"{where} holds {len(choices)} choices: read them as siblings with a per-call reader",
                code="ambiguous_structure",
                hint="log one choice per record, or use the calls format ({request, response})",
            )
        key, inner = next((k, i) for k, i in SAMPLE_LISTS if isinstance(value.get(k), list))
        # Why the engine stopped is logged on the choice, beside its message: it goes with the message, as do the
        # engine's ids (vLLM's choice token_ids, the response's prompt_token_ids) and the choice's logprobs.
        choice = value[key][0]
        finish = logged_finish(choice)
        engine = _choice_engine_ids(choice, value)
        value, where = choices[0], f"{where}.{key}[0].{inner}"
        if isinstance(value, dict):
            value = {**engine, **value, **({"finish_reason": finish} if finish is not None else {})}
    items = value if isinstance(value, list) else [value]
    for i, item in enumerate(items):
        builder.add(item, f"{where}[{i}]" if isinstance(value, list) else where, metadata=metadata)
    return None


def _choice_engine_ids(choice: Any, response: dict[str, Any]) -> dict[str, Any]:
    """The engine facts a response logged for its one choice, under the names a logged reply carries them
    (:func:`~msgtrain.ingest.common.conversation_files.logged_engine_ids`): the choice's ``token_ids``, the
    response's (or the choice's) ``prompt_token_ids``, and the choice's per-token logprobs when there is one per id
    (logprobs without ids, or not aligned with them, cannot be placed on tokens: left out, as the calls reader
    does)."""
    if not isinstance(choice, dict):
        return {}
    # the response's model and usage, as a reply logged with them carries them (a message's own win)
    out: dict[str, Any] = {k: response[k] for k in ("model", "usage") if isinstance(response.get(k), str | dict)}
    prompt = response.get("prompt_token_ids", choice.get("prompt_token_ids"))
    if prompt is not None:
        out["prompt_token_ids"] = prompt
    ids = choice.get("token_ids")
    if ids is None:
        return out
    out["completion_token_ids"] = ids
    content = choice["logprobs"].get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(content, list) and isinstance(ids, list) and len(content) == len(ids):
        logprobs = [e.get("logprob") if isinstance(e, dict) else None for e in content]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in logprobs):
            out["logprobs"] = logprobs
    return out


def _label(m: Mapping, holder: dict[str, Any], at: str) -> bool | None:
    if "kto_tag" not in m.columns:
        return None
    value = m.field_of(holder, "kto_tag")
    if isinstance(value, bool) or value is None:
        return value
    if value in (0, 1):
        return bool(value)
    raise ValidationError(
        f"the label at {at}.{m.columns['kto_tag']} is {json.dumps(value, default=str)}, not true or false",
        code="ambiguous_structure",
        hint="a KTO label says whether the reply is desirable: true or false",
    )


def _alpaca(builder: StepBuilder, holder: dict[str, Any], m: Mapping, at: str) -> None:
    """LLaMA-Factory's alpaca reading: history pairs, then ``prompt`` (+ "\\n" + ``query``) → ``response``."""
    history = m.field_of(holder, "history") or []
    for i, pair in enumerate(history if isinstance(history, list) else []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
            raise ValidationError(f"{at}.history[{i}] is not a [query, response] pair", code="ambiguous_structure")
        if pair[0] in NO_USER_MARKERS:  # no user spoke: the UI's scripted greeting, context never sampled
            builder.add({"role": "assistant", "content": pair[1]}, f"{at}.history[{i}][1]", trained=False)
            continue
        builder.add({"role": "user", "content": pair[0]}, f"{at}.history[{i}][0]")
        builder.add({"role": "assistant", "content": pair[1]}, f"{at}.history[{i}][1]")
    if "prompt" not in m.columns and "response" not in m.columns:
        return  # the pairs are the whole conversation
    prompt = m.field_of(holder, "prompt")
    query = m.field_of(holder, "query")
    text = "\n".join(t for t in (prompt, query) if isinstance(t, str) and t)
    builder.add({"role": "user", "content": text}, f"{at}.{m.columns['prompt']}")
    builder.add({"role": "assistant", "content": m.field_of(holder, "response")}, f"{at}.{m.columns['response']}")


# Where a chat history of [user, reply] pairs keeps each row's details, keyed ``assistant_<row>``, and under which
# key those hold every version of the row's reply (text-generation-webui's ``metadata.assistant_3.versions``: the
# regenerated replies, the one in the history among them).
ROW_DETAILS_KEYS = ("metadata",)
ROW_VERSIONS_KEY = "versions"


def _add_row_versions(graph: MessageGraph, replies: list[str], holder: dict[str, Any]) -> None:
    """The other versions of each row's reply (``replies``: the graph's node of each row's reply, in row order),
    each a sibling sampled after the same history; a scripted row's (a greeting's) alternatives stay out."""
    details: dict[str, Any] = next((holder[k] for k in ROW_DETAILS_KEYS if isinstance(holder.get(k), dict)), {})
    for row, node_id in enumerate(replies):
        node = graph.nodes[node_id]
        entry = details.get(f"assistant_{row}")
        versions = entry.get(ROW_VERSIONS_KEY) if isinstance(entry, dict) else None
        if not isinstance(versions, list) or node.origin != Origin.SAMPLED:
            continue
        seen = {"".join(getattr(p, "text", "") for p in getattr(node.message, "parts", ()))}
        for version in versions:
            text = version.get("content") if isinstance(version, dict) else None
            if isinstance(text, str) and text.strip() and text not in seen:
                seen.add(text)
                reply = PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm="assistant")
                graph.add_node(node.parent, reply, origin=Origin.SAMPLED)


def _preference(
    builder: StepBuilder,
    holder: dict[str, Any],
    m: Mapping,
    at: str,
    marks: tuple[str | None, str | None] = ("chosen", "rejected"),
) -> list[tuple[list[Step], str]]:
    """Prompt steps into ``builder``; returns the chosen and the rejected branch (see the module docstring), each
    reply marked as ``marks`` say (a tie marks both sides alike, or neither)."""
    prompt_col = "prompt" if "prompt" in m.columns else ("messages" if "messages" in m.columns else None)
    chosen, rejected = m.field_of(holder, "chosen"), m.field_of(holder, "rejected")
    for side, value in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(value, str | dict | list):
            raise ValidationError(
                f"the {side} reply at {at}.{m.columns[side]} is {json.dumps(value, default=str)[:80]}, not a reply",
                code="bad_preference",
                hint="a preference pair's chosen and rejected are each a reply: a string, a message or a message list",
            )
    if prompt_col is None and isinstance(chosen, str) and isinstance(rejected, str):
        chosen = parse_transcript(chosen) or chosen  # Anthropic HH-RLHF: both sides are whole transcripts
        rejected = parse_transcript(rejected) or rejected
    shared_prefix = prompt_col is None and isinstance(chosen, list) and isinstance(rejected, list)
    if shared_prefix:
        shared = 0  # implicit prompt: the messages the two conversations share
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        builder.add_list(chosen[:shared], f"{at}.chosen", trained=False)
        chosen, rejected = chosen[shared:], rejected[shared:]
    rendered = None
    if prompt_col is not None and not (isinstance(chosen, list) and isinstance(rejected, list) and shared_prefix):
        rendered = _prompt_steps(builder, m.field_of(holder, prompt_col), f"{at}.{m.columns[prompt_col]}")
    out: list[tuple[list[Step], str]] = []
    for value, side, mark in ((chosen, "chosen", marks[0]), (rejected, "rejected", marks[1])):
        branch = StepBuilder(forked(builder.norm), call_names=dict(builder.call_names))
        branch.steps = []
        meta = _reply_metadata({"preference": mark} if mark else None, rendered)
        _add_replies(branch, _logged_reply_text(value, rendered), f"{at}.{m.columns[side]}", meta)
        if not any(s.message.role == "assistant" for s in branch.steps):
            raise ValidationError(f"the {side} reply at {at}.{m.columns[side]} holds no assistant message")
        out.append((branch.steps, side))
    return out


def _text_branches(
    builder: StepBuilder, texts: list[str], where: str, metadata: dict[str, Any] | None
) -> list[tuple[list[Step], str]]:
    """One branch per generated text, each a reply sampled in the context ``builder`` holds. A sample logged as the
    text of a null (``None``: Python's ``str(None)``, as OpenAI Swarm's evals write a sample that called a function
    instead of answering) is not what the model wrote: kept as context, in the books with the reason, never
    trained."""
    out: list[tuple[list[Step], str]] = []
    for i, text in enumerate(texts):
        branch = StepBuilder(forked(builder.norm), call_names=dict(builder.call_names))
        branch.steps = []
        raw: dict[str, Any] = {"role": "assistant", "content": text}
        meta = metadata
        if text.strip() in _NULL_TEXTS:
            raw["weight"] = 0
            meta = {**(metadata or {}), "why_not_trained": _NULL_WHY.format(text=text.strip())}
        branch.add(raw, f"{where}[{i}]", metadata=meta)
        out.append((branch.steps, "sample"))
    return out


_NULL_TEXTS = frozenset({"None", "null"})
_NULL_WHY = "the sample was logged as {text!r}, a null written as text: what the model returned is not in the log"


def _copy_of_replies(value: Any, replies: set[str]) -> bool:
    """Whether ``value`` (a response object with choices, a message, a list of them) holds assistant messages and
    each says what one of ``replies`` says."""
    if isinstance(value, dict):
        messages = choice_messages(value) or [value]
    elif isinstance(value, list):
        messages = value
    else:
        return False
    texts = [said(m) for m in messages if assistant_like(m)]
    return bool(texts) and all(s in replies for s in texts)


def _check_nothing_beside(holder: dict[str, Any], m: Mapping, at: str) -> None:
    """Refuse a conversation whose record holds more replies beside it (ranked completions, a second transcript):
    reading one part and dropping the rest would lose those turns without a word."""
    used = {f for v in m.columns.values() for f in top_fields(holder, v)}
    # Only a list or an object the columns do not name can hold other replies (most records: none, nothing to check).
    others = {k: v for k, v in holder.items() if k not in used and isinstance(v, dict | list)}
    if not others:
        return
    # copies of a conversation read (UltraFeedback's ``messages`` beside ``chosen``) or of its prefixes (NeMo-Gym's
    # ``input_message_log``) hold no other reply
    read = [holder[c] for c in (m.columns.get(k) for k in ("messages", "chosen", "rejected")) if c in holder]
    read = [conv for conv in read if is_message_list(conv)]
    others = {
        k: v
        for k, v in others.items()
        if not (isinstance(v, list) and is_message_list(v) and any(is_prefix(v, conv) for conv in read))
    }
    # a response beside the conversation whose replies are the conversation's own (evalscope's ``model_output``
    # beside ``messages``, which ends with that reply) is their copy too
    if others:
        replies = {said(m) for conv in read for m in conv if assistant_like(m)}
        others = {k: v for k, v in others.items() if not _copy_of_replies(v, replies)}
    beside = {k: message_like_count(v)[1] for k, v in others.items()}
    beside = {k: n for k, n in beside.items() if n}
    if beside:
        shown = ", ".join(f"{at}.{k} ({n})" for k, n in sorted(beside.items()))
        raise ValidationError(
            f"assistant messages beside the conversation, in {shown}: which of them were sampled, and in which "
            "context, is ambiguous",
            code="ambiguous_structure",
            hint="write a mapping (--map) naming the messages, prompt/completion or chosen/rejected fields",
        )
