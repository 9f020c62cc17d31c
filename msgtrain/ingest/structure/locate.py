"""The structural reader's search: which conversations a record holds, and in which layout.

:func:`locate` walks a record (objects and lists, outermost first, bounded by :data:`MAX_SEARCH_DEPTH` and
:data:`MAX_SEARCH_NODES`) and returns a :class:`~msgtrain.ingest.structure.found.Found` per conversation, an
:class:`~msgtrain.ingest.structure.found.Ambiguity` per spot no layout reads; :func:`record_layout` judges one
object: messages, prompt / completion (and request / result pairs), preference pairs (with a judge's verdict),
alpaca instructions, scored candidates, numbered messages, trees.

Invariants:
- Never inside a conversation it found: a found conversation's subtree is not searched again, so no message is read
  twice by one record.
- Conservative: a layout is chosen only where the context of its replies is unambiguous; anything else is an
  Ambiguity that counts the replies it leaves untrained (two lists side by side, named agents, a preference pair with
  no or several prompts, replies logged without their requests).
- The search only looks: it neither raises nor converts (conversion is :mod:`msgtrain.ingest.structure.convert`).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from msgtrain.ingest.common.message_like import (
    CONTEXT_ITEMS,
    PREFERENCE_KEYS,
    TAGGED_UNIT_VARIANTS,
    UNLOGGED_INPUT,
    canonical_role,
    is_message_like,
    is_message_list,
    is_wrapper,
    named_agents,
    named_agents_error,
    role_of,
    said,
    thread_without_request,
    wrapped_messages,
)
from msgtrain.ingest.common.rendered_prompts import TRIMMING_FAMILIES, rendered_family, split_rendered_conversation
from msgtrain.ingest.common.shapes import parse_transcript
from msgtrain.ingest.common.tool_schemas import calls_not_schemas
from msgtrain.ingest.core.base import SourceRef
from msgtrain.ingest.structure.context import (
    SYSTEM_KEYS,
    TOOL_KEYS,
    context_here,
    inheriting,
    system_in_settings,
    text_blocks,
    tools_in_settings,
)
from msgtrain.ingest.structure.found import (
    FORK_KEYS,
    Ambiguity,
    Found,
    assistant_like,
    choice_messages,
    forks_trees,
    group_history,
    is_prefix,
    link_keys,
    nested_runs,
    pair_history_key,
    parallel_scores,
    same_value,
    sample_text,
    session_threads,
    text_samples,
    tree_key,
    versions_tree,
)
from msgtrain.ingest.structure.mapping import Mapping, dig
from msgtrain.ingest.structure.node_maps import node_map_key

MAX_SEARCH_DEPTH = 6  # containers searched below a record for a conversation
MAX_SEARCH_NODES = 20_000  # objects and lists looked at per record
# (context, reply) key pairs of one generation: TRL / verifiers prompt + completion, and the input / output of
# eval and tracing tools (a generation span's input messages and its output).
PAIR_KEYS = (
    ("prompt", "completion"),
    ("prompt", "response"),
    ("input", "output"),
    ("input", "completion"),
    ("messages", "completion"),
    ("messages", "response"),
    ("input", "response"),  # agent trajectories' per-step {input: [messages], response: ChatCompletion | Message}
    ("messages", "output"),
    ("history", "response"),
    ("origin_prompt", "prediction"),  # OpenCompass predictions/<model>/<dataset>.json
    ("input_prompt", "output_response"),  # SkyRL evaluation dumps
    ("prompt", "sampled"),  # openai/evals recorder "sampling" events
    ("user_prompt", "judgment"),  # FastChat llm_judge model_judgment lines: the judge's prompt and verdict
    ("messages", "actual_message"),  # OpenAI Swarm eval results: the messages sent, the n replies sampled for them
    ("query", "answers"),  # xLAM / APIGen function-calling rows: the query, the calls answering it (beside tools)
)
_UNLOGGED_SYSTEM_PAIRS = frozenset({("user_prompt", "judgment")})
# Where a preference record's prompt is (Intel/orca_dpo_pairs writes ``question``; OpenAI ``input.messages``).
_PREFERENCE_PROMPT_KEYS = ("prompt", "input", "question", "instruction", "query")
# A request beside its result, as HELM's scenario_state.json logs each request_state (the chat models' clients send
# the prompt as the user message) and as per-call logs of text-completion APIs do.
_REQUEST_RESULT_PAIRS = (
    ("request.prompt", "result.completions"),
    ("request.messages", "result.completions"),
    # A LangSmith LLM run: its one prompt's messages and the generations they got (batches of one; a batch of more
    # leaves the other prompts beside the pair, which rejects the run as holding replies it does not read).
    ("inputs.messages.0", "outputs.generations.0"),
    # Gateways' and tracers' request/response logs: Helicone's request_body / response_body, bodies under
    # request.body / response.body (Portkey), a request beside its response (Cloudflare AI Gateway; bodies kept as JSON
    # text are read as the bodies, msgtrain.ingest.common.json_bodies), whichever API the body is (chat messages,
    # Gemini contents, Responses input items beside the response's output)
    *(
        pair
        for request, response in (("request_body", "response_body"), ("request.body", "response.body"))
        for pair in ((f"{request}.messages", response), (f"{request}.contents", response))
    ),
    ("request_body.input", "response_body.output"),
    ("request.body.input", "response.body.output"),
    ("request.messages", "response"),
    ("request.contents", "response"),
    # an HTTP archive's exchange (HAR: the request's postData.text, the response's content.text, JSON or SSE text)
    ("request.postData.text.messages", "response.content.text"),
    ("request.postData.text.contents", "response.content.text"),
    ("request.postData.text.input", "response.content.text.output"),
    # W&B Weave calls' inputs / output; Langfuse observations as LiteLLM's callback sends them (batch[].body)
    ("inputs.messages", "output"),
    ("input.messages", "output"),
    # promptfoo eval results (results.results[]): the prompt sent (text, or a chat as JSON text) and the output
    ("prompt.raw", "response.output"),
    # Gemini requests beside their GenerateContentResponse (google-genai's contents + config): Google ADK's session
    # event_logs (model_request / model_response) and its callbacks' and traces' llm_request / llm_response
    ("model_request.contents", "model_response"),
    ("llm_request.contents", "llm_response"),
    # OpenAI Responses requests beside their response (its output items): logged calls, and NeMo Gym rollouts whose
    # lines are too long for its reader's detection (responses_create_params: the agent's first request)
    ("request.input", "response.output"),
    ("responses_create_params.input", "response.output"),
    # evalscope 0.x service evaluations (predictions / reviews lines): the chat completion its server adapter got,
    # beside the input it was made from, ``origin_prompt``, whose ``data[0]`` it sent as the user message (and a
    # ``system_prompt`` beside it, when set, as the system message)
    ("origin_prompt.data.0", "choices"),
)
# Where a traced call keeps the tools it was invoked with, away from its messages (a LangSmith LLM run's
# ``extra.invocation_params``, as LangChain's chat models report their bound tools).
_INVOCATION_TOOLS = ("extra.invocation_params.tools", "invocation_params.tools")
# Where a logged request keeps its system prompt beside its messages, relative to the request (google-genai's
# GenerateContentConfig: a string, or a Content of text parts).
_REQUEST_SYSTEM_KEYS = (
    "config.system_instruction",
    "config.systemInstruction",
    "config.system_instruction.parts",
    "config.systemInstruction.parts",
    "system_instruction",
    "systemInstruction",
    "system_instruction.parts",  # a Gemini REST request's Content of text parts
    "systemInstruction.parts",
    "instructions",  # an OpenAI Responses request's
    "system",  # an Anthropic Messages request's (text, or text blocks with their cache_control)
)
# A judge's pass / fail of a reply, nested in its record (promptfoo's gradingResult): a label like KTO's.
_NESTED_LABEL_KEYS = ("gradingResult.pass",)
ALPACA_PAIRS = (
    ("instruction", "output"),
    ("instruction", "response"),
    ("question", "response"),
    ("query", "response"),
)
# (``rewards`` a number: one sample's row of a trainer's batch log, NeMo RL's ``train_data_step{N}.jsonl``)
_REWARD_KEYS = ("reward", "rewards", "score")
# A string beside a list of replies that the user sent as the prompt they answer (the Responses API's and the OpenAI
# Agents SDK's ``input``, which may be a string: the one user message).
_STRING_PROMPT_KEYS = ("input",)
_LABEL_KEYS = ("label", "kto_tag")


@dataclass
class _Search:
    nodes: int = 0
    found: list[Found | Ambiguity] = field(default_factory=list)


def locate(value: Any, path: str = "$") -> list[Found | Ambiguity]:
    """Every conversation (or ambiguous spot) in ``value``, outermost first (module docstring)."""
    search = _Search()
    _locate(value, path, 0, search, {})
    return search.found


def _locate(value: Any, path: str, depth: int, search: _Search, inherited: dict[str, tuple[str, Any]]) -> None:
    search.nodes += 1
    if search.nodes > MAX_SEARCH_NODES:
        return
    if isinstance(value, list):
        if versions_tree(value) is not None:  # every version of each message kept (LM Studio): a tree, trees.py
            found = Found(
                path, {"messages": value}, Mapping("messages", {"messages": "messages", "children": "children"})
            )
            search.found.append(inheriting(found, inherited))
            return
        children = tree_key(value)
        if children is not None:  # nested children arrays (a chat UI's export, a search tree): each branch a sample
            found = Found(
                path, {"messages": value}, Mapping("messages", {"messages": "messages", "children": children})
            )
            search.found.append(inheriting(found, inherited))
            return
        if is_message_list(value):
            agents = named_agents(value)
            if agents:
                search.found.append(_agents_ambiguity(path, agents, value))
                return
            found = Found(path, {"messages": value}, Mapping("messages", {"messages": "messages"}))
            search.found.append(inheriting(found, inherited))
            return
        transcripts = rendered_transcripts(value, path)
        if transcripts:  # whole conversations a chat template rendered (an RL group's rollouts): each one call
            search.found.extend(transcripts)
            return
        whole = _partial_group(value)
        if whole:  # rollouts of a group, some of them not whole: counted, never joined into one dialogue
            why = (
                f"{whole} of the {len(value)} texts at {path} are each a whole conversation a chat template rendered "
                "(an RL group's rollouts), the others do not parse into whole turns (a rollout cut before its end "
                "token?): which text the model sampled for those is not certain"
            )
            search.found.append(Ambiguity(path, why, len(value)))
            return
        wrapped = wrapped_messages(value)
        if wrapped is not None:  # each item holds its message under one key, beside its own bookkeeping
            key, messages = wrapped
            found = Found(f"{path}[].{key}", {"messages": messages}, Mapping("messages", {"messages": "messages"}))
            # a chat extension's session (Continue's history items: each message beside the context items attached
            # to it) keeps what the user typed and the replies, never the system message its requests were built with
            found.unlogged_system = any(isinstance(item, dict) and CONTEXT_ITEMS in item for item in value)
            search.found.append(inheriting(found, inherited))
            return
        if depth < MAX_SEARCH_DEPTH:
            start = len(search.found)
            for i, item in enumerate(value):
                if isinstance(item, dict | list):
                    _locate(item, f"{path}[{i}]", depth + 1, search, inherited)
            _cumulative_steps(search.found[start:], path)
        return
    if not isinstance(value, dict):
        return
    decoded = _json_text_lists(value)
    if decoded:  # message lists a table kept as JSON text (a dataset's columns): read as the lists they are
        value = value | decoded
    units = _unit_variant_threads(value)
    if units:  # a tagged thread's unit variants (Zed's "Resume"): gaps, not items no layout reads
        value = value | units
    threads = session_threads(value)
    thread_lists = [t["messages"] for t in threads[1]] if threads else []
    trees = forks_trees(value, [value.get("messages"), *thread_lists])
    forked = trees[0] if trees else None
    if trees is not None:  # branches kept beside the lists by the message they fork after (Chatbox): trees
        value = {k: v for k, v in value.items() if k not in FORK_KEYS}
    if forked is not None:
        value |= {"messages": forked}
    if threads is not None:  # older threads kept beside the messages: read after the session's own, each alone
        value = {k: v for k, v in value.items() if k != threads[0]}
    runs = {k: value[k] for k in nested_runs(value)}
    if runs:  # runs of their own kept beside the messages (a team's members): read after the record's, each alone
        value = {k: v for k, v in value.items() if k not in runs}
    owned = owned_conversations(value)
    if owned is not None:  # one list of every session's messages, each naming its session, a prompt per session
        here = context_here(value, path, inherited)
        for owner_at, system, sub in owned:
            hit = record_layout(sub, path)
            if isinstance(hit, Found):
                context = {k: v for k, v in here.items() if k != "system"}
                if system is not None:
                    context["system"] = (f"{path}.{owner_at}", system)
                search.found.append(inheriting(hit, context))
            elif hit is not None:
                search.found.append(hit)
        return
    text_record = rendered_text_record(value, path)
    if text_record is not None:  # one whole conversation as the text a chat template rendered
        search.found.append(inheriting(text_record, inherited) if isinstance(text_record, Found) else text_record)
        return
    copy = transcript_of_calls(value)
    sampled = scored_samples(value, path) if copy is None else []
    if sampled:  # n texts sampled for one prompt, each with its reward: n rollouts of one group
        search.found.extend(inheriting(f, inherited) for f in sampled)
        return
    hit = record_layout(value, path) if copy is None else None
    passed: set[str | None] = {copy}
    if isinstance(hit, Found) and _sums_up_calls_below(value, hit):
        # the record's own pair is its calls' summary: the calls are read, each after its own messages
        passed |= {c.split(".")[0] for c in hit.mapping.columns.values()}
        hit = None
    if isinstance(hit, Found) and forked is not None:
        hit.forked = True
    if hit is not None:
        search.found.append(inheriting(hit, inherited) if isinstance(hit, Found) else hit)
        if threads is not None:
            if isinstance(hit, Found):
                hit.threaded = True
            _locate_threads(threads, trees[1:] if trees else [None] * len(threads[1]), path, depth, search, inherited)
        for key, items in runs.items():
            for i, item in enumerate(items):
                _locate(item, f"{path}.{key}[{i}]", depth + 1, search, inherited)
        return
    value |= runs
    scored = candidates(value, path) if copy is None else []
    if scored:
        search.found.extend(scored)
        return
    if depth < MAX_SEARCH_DEPTH:
        here = context_here(value, path, inherited)
        for key, item in value.items():
            if isinstance(item, dict | list) and key not in passed:
                start = len(search.found)
                _locate(item, f"{path}.{key}", depth + 1, search, here)
                _score_items(search.found[start:], f"{path}.{key}", parallel_scores(value, key))


# Keys by which a message row names the session (conversation, agent) it belongs to, beside its own id and links.
_LINK_KEYS = frozenset({"id", "parentId", "parent_id", "parent", "parentMessageId"})


def owned_conversations(record: dict[str, Any]) -> list[tuple[str, str | None, dict[str, Any]]] | None:
    """A chat app's export that keeps every session's messages in one list, each naming its session by an id
    (LobeChat's ``state.messages[].sessionId``), beside a list of the sessions, one of which at least holds the
    system prompt its requests were sent with (``config.systemRole``, or another of ``SYSTEM_KEYS`` in the session
    or its settings object): the record split by session, each part with the messages of one session (in file order)
    and that session's prompt (or None: the session had none), as ``(where the prompt is, prompt, record)``. None
    for anything else. Read whole, every session's conversation was read with no system prompt."""
    lists = [k for k, v in record.items() if isinstance(v, list) and v and is_message_list(v)]
    if len(lists) != 1:
        return None
    key = lists[0]
    messages = record[key]
    for owners_key, owners in record.items():
        if owners_key == key or not isinstance(owners, list) or not owners:
            continue
        ids = {o["id"]: i for i, o in enumerate(owners) if isinstance(o, dict) and isinstance(o.get("id"), str)}
        if len(ids) != len(owners):
            continue
        prompts = {i: _owner_prompt(o) for i, o in enumerate(owners)}
        if not any(prompts.values()):
            continue
        first = messages[0] if isinstance(messages[0], dict) else {}
        for fk in first:
            if fk in _LINK_KEYS or not all(isinstance(m, dict) and _names(m.get(fk), ids) for m in messages):
                continue
            # a session holds several conversations (LobeChat's topics: each message names its topic, or none for
            # the session's default one): each is a part of its own, with its session's prompt
            topic = _topic_key(record, messages, (key, owners_key), fk)
            out: list[tuple[str, str | None, dict[str, Any]]] = []
            for owner_id, topic_id in dict.fromkeys((m[fk], m.get(topic) if topic else None) for m in messages):
                i = ids[owner_id]
                at, prompt = prompts[i] or ("", None)
                part = [m for m in messages if m[fk] == owner_id and (topic is None or m.get(topic) == topic_id)]
                sub = {**record, key: part}
                sub.pop(owners_key)
                out.append((f"{owners_key}[{i}]{at}", prompt, sub))
            return out
    return None


def _topic_key(record: dict[str, Any], messages: list[Any], taken: tuple[str, ...], owner_key: str) -> str | None:
    """The field by which the messages also name an entry of another list of the record (its ``id``), or name none
    (null: the owner's default conversation): LobeChat's ``topicId`` against ``state.topics``. None when there is
    no such field."""
    lists = [
        {o["id"] for o in v if isinstance(o, dict) and isinstance(o.get("id"), str)}
        for k, v in record.items()
        if k not in taken and isinstance(v, list) and v
    ]
    first = messages[0] if isinstance(messages[0], dict) else {}
    for name in first:
        if name in _LINK_KEYS or name == owner_key:
            continue
        values = [m.get(name) for m in messages]
        for ids in lists:
            if (
                ids
                and any(v is not None for v in values)
                and all(v is None or (isinstance(v, str) and v in ids) for v in values)
            ):
                return name
    return None


def _names(value: Any, ids: dict[str, int]) -> bool:
    """Whether ``value`` is the id of one of the sessions (a string among ``ids``)."""
    return isinstance(value, str) and value in ids


def _owner_prompt(owner: Any) -> tuple[str, str] | None:
    """(path in ``owner``, text) of the system prompt a session object holds in its own keys or its settings."""
    if not isinstance(owner, dict):
        return None
    hit = next((k for k in OWNER_SYSTEM_KEYS if isinstance(owner.get(k), str) and owner[k].strip()), None)
    if hit is not None:
        return f".{hit}", owner[hit]
    for settings in ("config", "settings", "options"):
        inner = owner.get(settings)
        if isinstance(inner, dict):
            hit = next((k for k in OWNER_SYSTEM_KEYS if isinstance(inner.get(k), str) and inner[k].strip()), None)
            if hit is not None:
                return f".{settings}.{hit}", inner[hit]
    return None


# A session's system prompt: the record-level keys, and LobeChat's agent ``systemRole``.
OWNER_SYSTEM_KEYS = (*SYSTEM_KEYS, "systemRole")


def _locate_threads(
    threads: tuple[str, list[dict[str, Any]]],
    trees: list[list[Any] | None],
    path: str,
    depth: int,
    search: _Search,
    inherited: dict[str, tuple[str, Any]],
) -> None:
    """Each older thread of a chat session (:func:`session_threads`) as a conversation of its own: its messages (the
    tree of the session's branches that fork from them, if any), after the system prompt they hold."""
    key, items = threads
    for i, (thread, tree) in enumerate(zip(items, trees, strict=True)):
        start = len(search.found)
        _locate(
            thread if tree is None else thread | {"messages": tree}, f"{path}.{key}[{i}]", depth + 1, search, inherited
        )
        for item in search.found[start:]:
            if isinstance(item, Found):
                item.threaded = True
                item.forked = tree is not None


def _json_text_lists(record: dict[str, Any]) -> dict[str, list[Any]]:
    """The fields of ``record`` that hold the JSON text of a message list (a dataset's ``messages`` column kept as a
    string, as Toucan's and others' Parquet files keep it beside ``tools``), decoded; only texts that open a list are
    parsed. A reply's field (a pair's completion side) is decoded only into what a reply can be, the model's own
    messages (a conversational completion column: assistant turns and the results between them): a completion whose
    text is a whole dialogue, a user's turns included, is the text the model sampled (asked to write a sample chat
    as JSON), never a conversation to train inside."""
    out: dict[str, list[Any]] = {}
    for key, text in record.items():
        if not isinstance(text, str) or not text.startswith("[") or not text[1:].lstrip().startswith("{"):
            continue  # a list of objects, or no message list (numbers, a text that opens with a bracket)
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if is_message_list(value) and (key not in _REPLY_FIELDS or not any(_sent_to_model(m) for m in value)):
            out[key] = value
    return out


def _sent_tools(value: Any) -> bool:
    """A non-empty tools value that is not a record of the calls a run made (:func:`calls_not_schemas`)."""
    return bool(value) and not calls_not_schemas(value)


def _unit_variant_threads(record: dict[str, Any]) -> dict[str, list[Any]]:
    """The lists of ``record`` that are externally tagged threads (:func:`thread_without_request`) holding unit
    variants, which serde writes as bare strings (Zed's ``Message::Resume``: the user asked the agent to go on after
    its tool-use limit, and Zed sends a message for it the thread does not hold), with each such string a gap: a
    user message whose text the log does not hold (:data:`UNLOGGED_INPUT`), so the replies after it are context."""
    out: dict[str, list[Any]] = {}
    for key, items in record.items():
        if isinstance(items, list) and any(isinstance(m, str) for m in items) and thread_without_request(items):
            out[key] = [
                {"role": "user", "content": "", UNLOGGED_INPUT: f"a thread's {m!r} message"}
                if isinstance(m, str) and m in TAGGED_UNIT_VARIANTS
                else m
                for m in items
            ]
    return out


# The fields a pair keeps its reply in (the completion side of PAIR_KEYS and ALPACA_PAIRS)
_REPLY_FIELDS = frozenset(reply.partition(".")[0] for _, reply in (*PAIR_KEYS, *ALPACA_PAIRS))


def _sent_to_model(message: Any) -> bool:
    """A message someone sent the model (a user's or the system's), not one it wrote or a tool's result."""
    hit = role_of(message)
    return hit is not None and canonical_role(hit[1]) in ("user", "system")


def _cumulative_steps(found: list[Found | Ambiguity], path: str) -> None:
    """Conversations found one in each item of the list at ``path`` whose message lists each re-send the one before it
    and more (an agent's steps, each logging the whole conversation so far: rLLM's ``steps[].chat_completions``):
    the replies a step's list holds that the step before it already held are that step's history, sampled by the
    earlier step (:attr:`Found.history_replies`), never trained twice."""
    lists: list[tuple[Found, list[Any]]] = []
    for i, item in enumerate(found):
        if not (isinstance(item, Found) and item.path.startswith(f"{path}[{i}]")):
            return  # not one conversation per item, in order
        messages = item.mapping.field_of(item.holder, "messages")
        if item.mapping.layout != "messages" or item.forked or item.node_map or not isinstance(messages, list):
            return
        lists.append((item, messages))
    for (_, before), (item, messages) in itertools.pairwise(lists):
        # compared in place, stopping at the first difference (a list of unrelated conversations costs little)
        if len(before) < len(messages) and all(same_value(a, b) for a, b in zip(before, messages, strict=False)):
            item.history_replies = max(item.history_replies, sum(assistant_like(m) for m in before))


def _score_items(found: list[Found | Ambiguity], path: str, scores: list[float] | None) -> None:
    """Give each conversation found in item ``i`` of the list at ``path`` the score ``scores[i]`` (a list beside
    it that scores its items one by one: Atropos's ``scores`` beside ``messages``) as its reward."""
    if scores is None:
        return
    scored: list[Found] = []
    for item in found:
        match = re.match(rf"{re.escape(path)}\[(\d+)\](?=$|[.\[])", item.path)
        if isinstance(item, Found) and match and item.reward is None:
            item.reward = scores[int(match.group(1))]
            scored.append(item)
    for item in scored:
        item.group = path  # the rollouts of one scored group
    rollouts = [f.holder.get("messages") for f in scored if f.mapping.layout == "messages" and not f.forked]
    if len(rollouts) == len(scored) and all(isinstance(r, list) for r in rollouts):
        given = group_history([r for r in rollouts if isinstance(r, list)])
        for item in scored:
            # lists that each re-send the one before it keep what _cumulative_steps found
            item.history_replies = max(item.history_replies, given)


# Keys of a record that holds one whole conversation as the text a chat template rendered (a ``text`` column of
# SFT datasets, TRL's ``dataset_text_field``: ``<|im_start|>user ... <|im_end|>`` turn after turn).
TEXT_RECORD_KEYS = ("text",)


def rendered_text_record(record: dict[str, Any], path: str) -> Found | Ambiguity | None:
    """A record whose text (:data:`TEXT_RECORD_KEYS`, beside no list of objects) is one whole conversation a chat
    template rendered, its last reply closed by the family's end token: that conversation, its messages parsed back
    (:func:`~msgtrain.ingest.common.rendered_prompts.split_rendered_conversation`), each reply after the turns before
    it, as a message list is read. A text holding a family's control text that does not parse unambiguously (a
    prompt with no reply, a reply cut before its end token, tool turns, two families mixed) is refused with the
    reason; any other text (a document, not turns) is no conversation (None)."""
    key = next((k for k in TEXT_RECORD_KEYS if isinstance(record.get(k), str)), None)
    if key is None:
        pieces = [k for k, v in record.items() if _rendered_pieces(v)]
        key = pieces[0] if len(pieces) == 1 else None
    if key is None or any(isinstance(v, list) and any(isinstance(i, dict | list) for i in v) for v in record.values()):
        return None  # records or lists beside the text (messages, completions, rollouts): the text is not the record's
    text = record[key] if isinstance(record[key], str) else "".join(record[key])
    split = _whole_rendered(text)
    if split is None:
        family = rendered_family(text)
        if family is None:
            return None
        what = "the text at" if isinstance(record[key], str) else "the texts, joined, at"
        holds = "holds" if isinstance(record[key], str) else "hold"
        why = (
            f"{what} {path}.{key} {holds} {family} chat-template markup that does not parse into whole turns ending "
            "with a closed reply (a prompt with no reply, a reply cut before its end token, tool turns, or two "
            "families mixed): which text the model sampled, and after what, is not certain"
        )
        return Ambiguity(f"{path}.{key}", why, 0)
    prompt, reply = split
    content = prompt.reply_text(reply)
    messages = [
        *prompt.messages,
        {"role": "assistant", "content": content.strip() if prompt.family in TRIMMING_FAMILIES else content},
    ]
    holder = {**{k: v for k, v in record.items() if k != key}, "messages": messages}
    found = Found(path, holder, Mapping("messages", {"messages": "messages"}), rendered=True)
    found.reward = next((v for k in _REWARD_KEYS if _number(v := record.get(k))), None)
    return found


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _rendered_pieces(value: Any) -> bool:
    """Whether ``value`` is one rendered conversation kept as the texts of its messages, in order (NeMo RL's
    ``train_data_step{N}.jsonl``: ``content``, each message's text as its chat template rendered it, the reply's with
    its end token): two or more texts that together hold a family's markup, not each a whole conversation (an RL
    group's rollouts, :func:`rendered_transcripts`: two of them whole are a group, even when another one is cut).
    Read as their concatenation, as a ``text`` record is."""
    if not (isinstance(value, list) and len(value) > 1 and all(isinstance(v, str) for v in value)):
        return False
    # two texts that are each a whole conversation are rollouts of a group (one of them cut is still not a dialogue)
    return rendered_family("".join(value)) is not None and sum(1 for v in value if _whole_rendered(v)) < 2


def _partial_group(value: list[Any]) -> int:
    """How many texts of ``value`` (a list of texts holding a family's markup) are whole rendered conversations, when
    two or more are but not all: an RL group's rollouts with some of them cut; else 0."""
    if len(value) < 3 or not all(isinstance(v, str) for v in value) or rendered_family("".join(value)) is None:
        return 0
    whole = sum(1 for v in value if _whole_rendered(v))
    return whole if 2 <= whole < len(value) else 0


def _whole_rendered(text: str) -> Any:
    """``text`` as one whole rendered conversation (prompt, reply), or None; the newline a template writes after each
    turn's end token (ChatML's ``<|im_end|>\n``) may close it, as in :func:`rendered_text_record`."""
    return split_rendered_conversation(text) or split_rendered_conversation(text.rstrip("\n"))


def rendered_transcripts(value: list[Any], path: str) -> list[Found]:
    """A list of texts each of which is a whole conversation a chat template rendered, its last reply closed by the
    family's end token (Atropos keeps a group's rollouts so): one prompt / completion call per text, the reply after
    exactly the prompt the text holds (its system prompt included: nothing around the list is added to it). Empty
    unless every item is one (:func:`~msgtrain.ingest.common.rendered_prompts.split_rendered_conversation`)."""
    if not value or not all(isinstance(v, str) for v in value):
        return []
    out = []
    for i, text in enumerate(value):
        split = _whole_rendered(text)
        if split is None:
            return []
        holder = {"prompt": split[0].text, "completion": split[1]}
        columns = {"prompt": "prompt", "completion": "completion"}
        out.append(Found(f"{path}[{i}]", holder, Mapping("prompt_completion", columns), rendered=True))
    return out


def transcript_of_calls(record: dict[str, Any]) -> str | None:
    """The key of the one message list of ``record`` that a list of calls beside it reproduces (Google ADK's session:
    ``events``, the transcript, beside ``event_logs``, each model call's request and response), or None. Every
    assistant message of the transcript is the reply of one of the calls, so the calls are read, each reply after
    exactly the request its call sent (with that request's system prompt and tools, which a transcript leaves out),
    and the transcript is passed over as their copy. A transcript holding a reply no call holds is not a copy: the
    record stays ambiguous (:func:`_check_nothing_beside` of the structural conversion refuses it)."""
    lists = [k for k, v in record.items() if is_message_list(v)]
    if len(lists) != 1:
        return None
    replies: set[str] = set()
    for key, value in record.items():
        if key == lists[0] or not (isinstance(value, list) and value and all(isinstance(v, dict) for v in value)):
            continue
        found = []  # each item a call: stop at the first that is not (most lists beside a transcript are not calls)
        for item in value:
            hit = record_layout(item, "")
            if not (isinstance(hit, Found) and hit.mapping.layout == "prompt_completion"):
                break
            found.append(_reply_messages(dig(item, hit.mapping.columns["completion"])))
        else:
            replies |= {said(m) for messages in found for m in messages}
    sampled = [said(m) for m in record[lists[0]] if assistant_like(m)]
    return lists[0] if replies and sampled and all(s in replies for s in sampled) else None


def _reply_messages(value: Any) -> list[Any]:
    """The messages of a logged reply: a response body's choices / candidates, a message, a list of them, text."""
    if isinstance(value, dict):
        return choice_messages(value) or [value]
    return value if isinstance(value, list) else [value]


def _keyed_messages(record: dict[str, Any]) -> dict[str, str] | None:
    """Columns of an object of messages keyed by their ids that name their parents (``{id: {id, parentId, role,
    content}}``), or None."""
    for key, value in record.items():
        if not (isinstance(value, dict) and value and is_message_list(list(value.values()))):
            continue
        links = link_keys([(SourceRef("", ""), v) for v in value.values()])
        if links is not None:
            return {"messages": key, "id": links[0], "parent": links[1]}
    return None


def record_layout(record: dict[str, Any], path: str) -> Found | Ambiguity | None:
    """The layout of one object, if it holds a conversation directly (not in a nested object)."""
    tree = node_map_key(record)
    if tree is not None:  # a chat UI's message tree (ChatGPT's mapping): msgtrain.ingest.structure.node_maps
        return Found(path, record, Mapping("messages", {"messages": tree}), node_map=True)
    numbered = _numbered_messages(record)
    if numbered is not None:  # message_1, message_2, ... (CAMEL role-playing records): one list, in number order
        return numbered_layout(record, path, *numbered)
    keyed = _keyed_messages(record)
    if keyed is not None:  # messages keyed by their ids, each naming its parent (Open WebUI's chat.history)
        return Found(path, record, Mapping("messages", keyed))
    lists = [k for k, v in record.items() if is_message_list(v)]
    if lists and is_message_like(record):  # a message tree (OpenAssistant ``replies``): each branch a conversation
        if len(lists) > 1:
            count = _assistant_count(record)
            return Ambiguity(path, f"a message tree nested under several keys ({', '.join(lists)})", count)
        return Found(path, {"messages": [record]}, Mapping("messages", {"messages": "messages", "children": lists[0]}))
    columns: dict[str, str] = {}
    for key in SYSTEM_KEYS:
        if isinstance(record.get(key), str) or text_blocks(record.get(key)) is not None:
            columns["system"] = key
            break
    for key in TOOL_KEYS:
        if record.get(key) and not calls_not_schemas(record[key]):
            columns["tools"] = key
            break
    if "tools" not in columns and (beside := tools_in_settings(record)) is not None:
        columns["tools"] = beside
    for key in _REWARD_KEYS:
        value = record.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            columns["reward"] = key
            break
    for key in (*_LABEL_KEYS, *_NESTED_LABEL_KEYS):
        if isinstance(dig(record, key), bool):
            columns["kto_tag"] = key
            break
    unreadable = _unreadable_replies(record)
    if unreadable is not None:
        return Ambiguity(path, unreadable[0], unreadable[1])
    if _batch_result(record):
        return Ambiguity(
            path,
            "a Batch API result: the reply without the request it answers (the requests are in the batch input "
            "file: the batch reader joins the two by custom_id when they share a folder)",
            max(_assistant_count(record), 1),
        )
    judged = _judged_pair(record)
    if judged is not None:
        found = _preference_layout(record, path, columns, judged[0], lists)
        if isinstance(found, Found):
            found.marks = judged[1]
        return found
    pair = next((p for p in PREFERENCE_KEYS if _replies(record.get(p[0])) and _replies(record.get(p[1]))), None)
    if pair is not None:
        return _preference_layout(record, path, columns, pair, lists)
    alpaca = _alpaca_columns(record, lists)
    if alpaca is not None:
        return Found(path, record, Mapping("alpaca", columns | alpaca))
    history = pair_history_key(record) if not lists else None
    if history is not None:  # a chat history of [user, reply] pairs, the whole conversation (text-generation-webui)
        return Found(path, record, Mapping("alpaca", columns | {"history": history}))
    tool_run = _runs_a_tool(record)
    replied = _reply_beside(record, lists)
    pairs = (*PAIR_KEYS, *_suffixed_pairs(record), *_REQUEST_RESULT_PAIRS, *(replied if len(replied) == 1 else ()))
    for prompt_key, completion_key in pairs:
        if tool_run:
            break  # a tool's arguments and result, not a model's prompt and reply
        prompt, completion = dig(record, prompt_key), dig(record, completion_key)
        if prompt is not None and _replies(completion) and _prompt_like(prompt):
            columns |= {"prompt": prompt_key, "completion": completion_key}
            request = prompt_key.rpartition(".")[0]
            where = (f"{request}.{k}" for k in (*TOOL_KEYS, *(f"config.{t}" for t in TOOL_KEYS)))
            tools = next((k for k in where if request and _sent_tools(dig(record, k))), None)
            tools = tools or next((k for k in _INVOCATION_TOOLS if _sent_tools(dig(record, k))), None)
            if tools is not None and "tools" not in columns:
                columns["tools"] = tools  # the tools the logged request sent, beside its messages (or its config)
            system = next(
                (f"{request}.{k}" for k in _REQUEST_SYSTEM_KEYS if request and _system_text(record, f"{request}.{k}")),
                None,
            )
            owner = re.sub(r"(\.\d+)+$", "", prompt_key).rpartition(".")[0]  # the object the prompt is a field of
            if system is None and owner and owner != request:
                system = next((f"{owner}.{k}" for k in SYSTEM_KEYS if _system_text(record, f"{owner}.{k}")), None)
            if system is not None and "system" not in columns:
                columns["system"] = system  # the system prompt the logged request sent
            # a judge's system prompt is in the judge_prompts file, not in its judgment lines
            unlogged = (prompt_key, completion_key) in _UNLOGGED_SYSTEM_PAIRS
            return Found(path, record, Mapping("prompt_completion", columns), unlogged_system=unlogged)
    if len(replied) > 1:
        keys = ", ".join(f"{path}.{k}" for _, k in replied)
        return Ambiguity(path, f"replies to the messages beside them under several keys ({keys}): which one?", 1)
    longest = _longest_holding_the_others(record, lists)
    if longest is not None and named_agents(record[longest]):
        return _agents_ambiguity(f"{path}.{longest}", named_agents(record[longest]), record[longest])
    prompt_beside = _prompt_beside(record, longest) if longest is not None else None
    if longest is not None and prompt_beside is not None:
        # the items an agent's run produced beside the user's prompt as a string (OpenAI Agents SDK's RunResult:
        # ``input``, ``new_items``): the prompt is the user message they were sampled after
        columns |= {"prompt": prompt_beside, "completion": longest}
        return Found(path, record, Mapping("prompt_completion", columns))
    if longest is not None:  # one list, or a transcript beside its own prefixes (NeMo-Gym's input_message_log)
        columns["messages"] = longest
        children = tree_key(record[longest])
        if children is not None:  # its messages nest their replies: a tree
            columns["children"] = children
        links = link_keys([(SourceRef("", ""), v) for v in record[longest] if isinstance(v, dict)])
        if children is None and links is not None:  # its messages name their parents: a tree
            columns |= {"id": links[0], "parent": links[1]}
        whole = _tree_holding(record, longest) if children is None else None
        if whole is not None:  # the branch shown, beside the whole tree it was cut from: the tree
            columns |= whole
        if "system" not in columns:
            beside = system_in_settings(record)
            if beside is not None:
                columns["system"] = beside
        if "system" not in columns and isinstance(record.get("prompt"), str) and record["prompt"].strip():
            columns["system"] = "prompt"  # a chat UI's conversation: its system prompt beside its messages
        return Found(path, record, Mapping("messages", columns))
    if _conversations_by_key(record, lists):
        return None  # each list is a conversation of its own: the search finds each under its key
    if len(lists) > 1:
        shown = ", ".join(f"{path}.{k}" for k in lists)
        count = max(_assistant_count(record[k]) for k in lists)
        return Ambiguity(path, f"several message lists side by side ({shown}): which is the conversation?", count)
    return None


def _tree_holding(record: dict[str, Any], key: str) -> dict[str, str] | None:
    """Columns of a tree of messages keyed by id, in an object beside the list ``record[key]``, that holds every
    message of the list (Open WebUI saves a chat's shown branch as ``messages`` beside ``history.messages``, which
    also keeps the regenerated replies and edited prompts): the list is one of its branches, so the tree is read.
    None when there is no such tree."""
    for name, value in record.items():
        keyed = _keyed_messages(value) if isinstance(value, dict) else None
        if keyed is None:
            continue
        id_key = keyed["id"]
        tree = value[keyed["messages"]]
        ids = {str(m.get(id_key)) for m in tree.values() if isinstance(m, dict)}
        if all(isinstance(m, dict) and str(m.get(id_key)) in ids for m in record[key]):
            return {"messages": f"{name}.{keyed['messages']}", "id": id_key, "parent": keyed["parent"]}
    return None


NUMBERED_KEY = re.compile(r"^(?P<stem>.*?)_?(?P<n>\d+)$")
# CAMEL's RoleType names, as its messages' ``to_dict`` writes them: which agent spoke, whatever the OpenAI role.
CAMEL_ROLE_TYPES = {"USER": "user", "ASSISTANT": "assistant"}


def _numbered_messages(record: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(stem, keys in number order) when the record's message-like values are all under numbered keys of one stem
    (``message_1``, ``message_2``, ...), at least two of them; else None."""
    keys = [k for k, v in record.items() if is_message_like(v)]
    if len(keys) < 2:
        return None
    matches = [NUMBERED_KEY.match(k) for k in keys]
    if not all(matches) or len({m.group("stem") for m in matches if m}) != 1:
        return None
    numbers = sorted((int(m.group("n")), k) for m, k in zip(matches, keys, strict=True) if m)
    if len({n for n, _ in numbers}) != len(numbers):
        return None
    return matches[0].group("stem") if matches[0] else "", [k for _, k in numbers]


def numbered_layout(record: dict[str, Any], path: str, stem: str, keys: list[str]) -> Found:
    """A record of numbered messages as one message list (``{stem}_*``, in number order). Messages that name their
    agent with CAMEL's ``role_type`` (``USER`` / ``ASSISTANT``) are read by it: in a CAMEL role-playing session both
    agents are models, and the log writes each reply's OpenAI role as its own agent saw it; the ASSISTANT agent's
    view is the one read (its replies trained, the AI user's instructions its user turns), and its system message,
    which the record does not save, is marked missing."""
    column = f"{stem}_*"  # the mapping reads the numbered fields in number order (Mapping.field_of)
    camel = all(record[k].get("role_type") in CAMEL_ROLE_TYPES for k in keys)
    mapping = Mapping("messages", {"messages": column})
    if camel:
        mapping = Mapping("messages", {"messages": column}, role_key="role_type", roles=dict(CAMEL_ROLE_TYPES))
    return Found(path, record, mapping, unlogged_system=camel)


def _agents_ambiguity(path: str, agents: list[str], messages: list[Any]) -> Ambiguity:
    """A transcript among named agents (AutoGen): refused, with the mapping that would train one of them."""
    error = named_agents_error(agents, path)
    return Ambiguity(path, f"{error.message} ({error.hint})", _assistant_count(messages))


def _alpaca_columns(record: dict[str, Any], lists: list[str]) -> dict[str, str] | None:
    """Columns of an instruction record: alpaca's ``instruction`` (+ ``input``) + ``output``, and the variants
    instruction datasets write beside no message list (databricks-dolly ``instruction`` + ``context`` +
    ``response``, OpenOrca ``question`` + ``response``, MetaMathQA ``query`` + ``response``). Beside a message list
    (Magpie repeats its conversation as ``instruction`` + ``response``), the list is the conversation."""
    prompt: str | None = None
    response: str | None = None
    if isinstance(record.get("instruction"), str) and isinstance(record.get("output"), str):
        prompt, response = "instruction", "output"
    elif not lists:
        prompt = next((k for k in ("instruction", "question", "query") if _prompt_like(record.get(k))), None)
        response = next((k for k in ("output", "response") if isinstance(record.get(k), str)), None)
    if prompt is None or response is None:
        return None
    columns = {"prompt": prompt, "response": response}
    query = next((k for k in ("input", "context") if isinstance(record.get(k), str) and k != prompt), None)
    if query is not None:
        columns["query"] = query
    if isinstance(record.get("history"), list):
        columns["history"] = "history"
    return columns


def _preference_layout(
    record: dict[str, Any], path: str, columns: dict[str, str], pair: tuple[str, str], lists: list[str]
) -> Found | Ambiguity:
    """A preference record: its two replies and where their shared context is (module docstring).

    Conversations that hold their own context (the messages both sides share, or two role-labelled text
    transcripts) need no prompt column: a ``prompt`` / ``messages`` beside them repeats it and is carried to the
    rows. Bare replies need exactly one prompt; with none, the context they were sampled in is not in the record."""
    chosen_key, rejected_key = pair
    columns |= {"chosen": chosen_key, "rejected": rejected_key}
    chosen, rejected = record[chosen_key], record[rejected_key]
    if _holds_context(chosen) and _holds_context(rejected):
        return Found(path, record, Mapping("preference", columns))
    prompts: list[tuple[str, str]] = []  # (column, path in the record)
    for key in dict.fromkeys((*_PREFERENCE_PROMPT_KEYS, *lists)):
        value = record.get(key)
        if key in pair or value is None:
            continue
        if isinstance(value, dict) and is_message_list(value.get("messages")):  # OpenAI preference fine-tuning
            prompts.append(("messages", f"{key}.messages"))
            if value.get("tools") and "tools" not in columns:
                columns["tools"] = f"{key}.tools"
        elif _prompt_like(value):
            prompts.append(("messages" if isinstance(value, list) else "prompt", key))
    if len(prompts) > 1:
        shown = ", ".join(p for _, p in prompts)
        return Ambiguity(path, f"preference pair with several prompts ({shown})", _assistant_count(record))
    if not prompts:
        return Ambiguity(
            path,
            f"preference pair ({chosen_key} / {rejected_key}) with no prompt: the context its replies were "
            "sampled in is not in the record",
            _assistant_count(record) or 2,
        )
    column, key = prompts[0]
    columns[column] = key
    return Found(path, record, Mapping("preference", columns))


# A judge's verdict on two replies: (side a, side b, the verdict's key, its values for a and for b). LMSYS Chatbot
# Arena battles (conversation_a / conversation_b, winner model_a | model_b | tie | tie (bothbad)) and PKU-SafeRLHF
# pairs (response_0 / response_1, better_response_id 0 | 1).
JUDGED_PAIRS = (
    ("conversation_a", "conversation_b", "winner", "model_a", "model_b"),
    ("response_0", "response_1", "better_response_id", 0, 1),
)
# A judge's verdict on a scale from one side to the other: AlpacaEval annotations (instruction, output_1 / output_2,
# preference 1 = output_1 preferred, 2 = output_2, 1.5 a draw; the weighted annotators write the probability-weighted
# value between them, read by which side of 1.5 it falls on).
SCALED_PAIRS = (("output_1", "output_2", "preference"),)
# Verdicts that prefer neither side: LMSYS writes "tie" (both good) and "tie (bothbad)".
_TIE_MARKS: dict[Any, tuple[str | None, str | None]] = {"tie": (None, None), "tie (bothbad)": ("rejected", "rejected")}


# Candidate replies to one instruction, each with its own score: UltraFeedback's ``completions`` ({model,
# response, overall_score, custom_system_prompt}), distilabel's ``generations`` + ``ratings``. Each candidate is
# its own conversation (its system prompt may differ), its score its reward; the best-scored are labelled good,
# the others bad (trained only with --train-negative, as any reply marked bad).
# berkeley-nest/Nectar: ``answers`` [{answer, model, rank}], rank 1 the best (a rank, not a score: lower is better)
CANDIDATE_LISTS = ("completions", "generations", "candidates", "answers")
_CANDIDATE_TEXT = ("response", "text", "completion", "output", "answer")
_CANDIDATE_SCORE = ("overall_score", "score", "reward", "rating")
_CANDIDATE_SYSTEM = ("custom_system_prompt", "system_prompt", "system")
_PARALLEL_SCORES = ("ratings",)  # a judge's ratings; rewards and scores of n samples are rollouts (scored_samples)


# n texts sampled for one prompt, each with its reward: beside them, item for item (:data:`SCORE_LIST_KEYS`), or in
# each item (``{completion, reward, ...}``). An RL rollout dump or a best-of-n file: RLHFlow's ``{prompt, responses,
# rewards}``, a GRPO step's ``{prompt, completions, rewards}``, offline GRPO's ``{prompt, rollouts: [{completion,
# reward}]}``.
SAMPLE_LISTS = ("completions", "responses", "generations", "samples", "outputs", "rollouts")
SAMPLE_PROMPT_KEYS = ("prompt", "messages", "question", "instruction", "query", "input")


def scored_samples(record: dict[str, Any], path: str) -> list[Found]:
    """One prompt-completion conversation per sample of a record holding n texts sampled for one prompt and a reward
    for each (see above), or none: each sample is a rollout of its own with its own reward, the n of them one group
    (:attr:`Found.group`), every one trained (its reward, not a label, says how good it was)."""
    prompt_key = next((k for k in SAMPLE_PROMPT_KEYS if _prompt_like(record.get(k))), None)
    if prompt_key is None:
        return []
    for key in SAMPLE_LISTS:
        items = record.get(key)
        rollouts = _rewarded_items(record, key, items)
        if rollouts is None:
            continue
        # the record's own scalars (an id, a step, a data source) are facts of each rollout: a --group-by key
        shared = {k: v for k, v in record.items() if not isinstance(v, dict | list) and k != prompt_key}
        system = next((k for k in SYSTEM_KEYS if isinstance(record.get(k), str) and record[k].strip()), None)
        out = []
        for i, own in enumerate(rollouts):
            holder = {**shared, **own, "prompt": record[prompt_key]}
            columns = {"prompt": "prompt", "completion": "completion", "reward": "reward"}
            if system is not None:
                columns["system"] = system
            mapping = Mapping("prompt_completion", columns)
            out.append(Found(f"{path}.{key}[{i}]", holder, mapping, group=f"{path}.{key}", assembled=True))
        return out
    return []


def _rewarded_items(record: dict[str, Any], key: str, items: Any) -> list[dict[str, Any]] | None:
    """Each sample of ``items`` as ``{completion, reward, its own scalars}``, or None unless every one is a text
    with a reward (beside the list, or in the item under ``reward``)."""
    if text_samples(items):
        scores = parallel_scores(record, key)
        texts = [sample_text(v) for v in items]
        return None if scores is None else [{"completion": t, "reward": r} for t, r in zip(texts, scores, strict=True)]
    if not isinstance(items, list) or not items:
        return None
    out = []
    for item in items:
        text = (
            next((item[k] for k in _CANDIDATE_TEXT if isinstance(item.get(k), str)), None)
            if isinstance(item, dict)
            else None
        )
        reward = item.get("reward") if isinstance(item, dict) else None
        if text is None or not isinstance(reward, int | float) or isinstance(reward, bool):
            return None
        own = {k: v for k, v in item.items() if not isinstance(v, dict | list) and k not in _CANDIDATE_TEXT}
        out.append({**own, "completion": text, "reward": reward})
    return out


def candidates(record: dict[str, Any], path: str) -> list[Found]:
    """One prompt-completion conversation per scored candidate of a record (see above), or none."""
    prompt_key = next((k for k in ("instruction", "prompt", "question") if _prompt_like(record.get(k))), None)
    if prompt_key is None:
        return []
    for key in CANDIDATE_LISTS:
        items = record.get(key)
        if not isinstance(items, list) or not items:
            continue
        holders = _candidate_holders(record, key, items)
        if holders is None:
            continue
        out = []
        ranked = all("reward" not in h for h in holders)  # ranks: 1 the best; scores: the highest the best
        best = min(h["rank"] for h in holders) if ranked else max(h["reward"] for h in holders)
        for i, extra in enumerate(holders):
            # the best-judged candidates are the desirable replies; the others were judged worse than one of them,
            # so they are trained only with --train-negative (each keeps its score as reward, or its rank, either way)
            judged = extra["rank"] if ranked else extra["reward"]
            holder = {**extra, "prompt": record[prompt_key], "label": judged == best}
            columns = {"prompt": "prompt", "completion": "completion", "kto_tag": "label"}
            columns |= {c: c for c in ("system", "reward") if c in holder}
            out.append(Found(f"{path}.{key}[{i}]", holder, Mapping("prompt_completion", columns), assembled=True))
        return out
    return []


def _candidate_holders(record: dict[str, Any], key: str, items: list[Any]) -> list[dict[str, Any]] | None:
    """Each candidate as {completion, reward?, system?, other scalar fields}; None unless every one is a scored
    reply (a list of anything else is no candidate list)."""
    if all(isinstance(t, str) for t in items):
        scores = next((record[k] for k in _PARALLEL_SCORES if isinstance(record.get(k), list)), None)
        if scores is None or len(scores) != len(items):
            return None
        values = [s.get("score") if isinstance(s, dict) else s for s in scores]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return None
        return [{"completion": t, "reward": v} for t, v in zip(items, values, strict=True)]
    holders = []
    for item in items:
        if not isinstance(item, dict):
            return None
        text = next((item[k] for k in _CANDIDATE_TEXT if isinstance(item.get(k), str)), None)
        score = next((item[k] for k in _CANDIDATE_SCORE if k in item), None)
        judged = {"reward": score} if score is not None else {"rank": item.get("rank")}
        value = next(iter(judged.values()))
        if text is None or not (isinstance(value, int | float) and not isinstance(value, bool)):
            return None
        holder = {k: v for k, v in item.items() if not isinstance(v, dict | list) and k not in _CANDIDATE_TEXT}
        holder |= {"completion": text, **judged}
        system = next((item[k] for k in _CANDIDATE_SYSTEM if isinstance(item.get(k), str) and item[k]), None)
        if system is not None:
            holder["system"] = system
        holders.append(holder)
    return holders if len({"reward" in h for h in holders}) == 1 else None  # scores or ranks, never a mix


def _unreadable_replies(record: dict[str, Any]) -> tuple[str, int] | None:
    """(why, how many replies) for records that hold replies no context can be built for, so they are rejected
    and counted instead of being passed over as holding no conversation."""
    completions, labels = record.get("completions"), record.get("labels")
    if (
        _prompt_like(record.get("prompt"))
        and isinstance(completions, list)
        and text_samples(completions)
        and isinstance(labels, list)
        and len(labels) == len(completions)
        and all(isinstance(v, bool) for v in labels)
    ):  # TRL stepwise supervision: the steps of one reply, a label each
        return (
            "stepwise supervision (completions = the steps of one reply, labels per step): how the steps join into "
            "the reply is the trainer's setting (TRL's step_separator); map it with --map once joined",
            1,
        )
    choices = record.get("choices")
    if (
        isinstance(choices, list)
        and choices
        and all(isinstance(c, dict) and text_samples(c.get("turns")) for c in choices)
        and not any(_prompt_like(record.get(k)) for k in ("prompt", "question", "turns", "messages"))
    ):  # FastChat MT-bench model_answer: each choice's replies, turn by turn
        return (
            "replies logged without the questions they answer (FastChat MT-bench model answers: the mt_bench reader "
            "joins them by question_id with the question.jsonl beside them or one folder up)",
            sum(len(c["turns"]) for c in choices),
        )
    return None


def _batch_result(record: dict[str, Any]) -> bool:
    """A line of an OpenAI Batch API output file (``{custom_id, response: {status_code, body}}``) or of Anthropic
    Message Batches results (``{custom_id, result: {type, message}}``): replies whose requests are elsewhere."""
    if "custom_id" not in record:
        return False
    response, result = record.get("response"), record.get("result")
    return (isinstance(response, dict) and isinstance(response.get("body"), dict)) or (
        isinstance(result, dict) and isinstance(result.get("message"), dict)
    )


def _judged_pair(record: dict[str, Any]) -> tuple[tuple[str, str], tuple[str | None, str | None]] | None:
    """((chosen key, rejected key), marks) of a record holding two replies and a judge's verdict on them."""
    for a, b, key, a_wins, b_wins in JUDGED_PAIRS:
        if not (_replies(record.get(a)) and _replies(record.get(b))) or key not in record:
            continue
        verdict = record[key]
        if isinstance(verdict, bool):
            continue
        if verdict == a_wins:
            return (a, b), ("chosen", "rejected")
        if verdict == b_wins:
            return (b, a), ("chosen", "rejected")
        if isinstance(verdict, str) and verdict in _TIE_MARKS:
            return (a, b), _TIE_MARKS[verdict]
    for a, b, key in SCALED_PAIRS:
        verdict = record.get(key)
        if not (_replies(record.get(a)) and _replies(record.get(b))) or isinstance(verdict, bool):
            continue
        if isinstance(verdict, int | float) and 1 <= verdict <= 2:
            if verdict == 1.5:  # a draw: neither side preferred, both trained as LMSYS ties are
                return (a, b), (None, None)
            return ((a, b) if verdict < 1.5 else (b, a)), ("chosen", "rejected")
    return None


def _holds_context(value: Any) -> bool:
    """A preference side that is a whole conversation: messages before its reply, or a text transcript."""
    if isinstance(value, str):
        return parse_transcript(value) is not None
    if not is_message_list(value) or len(value) < 2:
        return False
    first = role_of(value[0])
    return first is not None and canonical_role(first[1]) not in ("assistant", "call")


def _longest_holding_the_others(record: dict[str, Any], lists: list[str]) -> str | None:
    """The message list that every other one is a prefix of (same roles and contents, in order), or None."""
    if not lists:
        return None
    longest = max(lists, key=lambda k: len(record[k]))
    return longest if all(is_prefix(record[key], record[longest]) for key in lists) else None


# The names logs give the message lists of one conversation's record (the pairs' sides, a history, views of it):
# lists under them are parts of one record, never conversations keyed by id.
_FIELD_NAMES = frozenset(
    {k.partition(".")[0] for pair in (*PAIR_KEYS, *PREFERENCE_KEYS) for k in pair}
    | {"messages", "history", "context", "conversation", "conversations", "chat", "dialog", "turns", "traj"}
    | {"trajectory", "transcript", "steps", "memory", "display_messages", "ui_messages", "uiMessages"}
)


def _conversations_by_key(record: dict[str, Any], lists: list[str]) -> bool:
    """Whether ``record`` is a map of conversations keyed by their ids (LlamaIndex's chat store: ``store`` keyed by
    chat, each a message list): every value a message list, each opening with another user message, so none is a
    view or a copy of another."""
    if len(lists) < 2 or len(lists) != len(record):
        return False
    if record.keys() & _FIELD_NAMES:
        return False  # fields of one record (an input beside its history), not ids
    openings = set()
    for key in lists:
        first = next((m for m in record[key] if (hit := role_of(m)) and canonical_role(hit[1]) == "user"), None)
        openings.add(said(first) if first is not None else None)
    return None not in openings and len(openings) == len(lists)


# What a field holding the reply to a record's messages is named, whatever the words around it (``reply``,
# ``next_turn``, ``output_text``, ``model_answer``): a reply, never a reference to score one by.
_REPLY_NAME = re.compile(r"(?:^|_)(?:reply|response|answer|output|completion|generation|prediction|next_turn)s?(?:_|$)")
_REFERENCE_NAME = re.compile(
    r"(?:^|_)(?:gold|golden|reference|expected|target|label|ground_truth|gt|ideal|true|correct|final)(?:_|$)"
)


# A bare ``answer`` / ``solution`` beside a prompt is the reference of an RL or eval prompt dataset (TRL's GRPO and
# verifiers rows ``{"prompt": [...], "answer": ...}``, GSM8K / MATH in chat form) unless the record shows a model wrote
# it: the keys a logged call keeps beside its reply.
_BARE_ANSWER = re.compile(r"answers?|solutions?")
_MODEL_EVIDENCE = frozenset(
    {"model", "model_name", "model_id", "usage", "finish_reason", "stop_reason", "logprobs", "sampling_params"}
    | {"generation_config", "temperature"}
)


def _reply_beside(record: dict[str, Any], lists: list[str]) -> list[tuple[str, str]]:
    """(prompt key, reply key) when ``record`` holds one message list that awaits a reply (its last message is not
    the assistant's) and one field beside it that is that reply: a response body, an assistant message, or a text
    whose key names a reply (:data:`_REPLY_NAME`, not a reference's name). A record that keeps its reply under a key
    no list of known pairs holds (``context`` / ``reply``, ``chat_history`` / ``response``) is that call, never a
    conversation with nothing to train and its reply unread; a text the messages already hold (an agent run's final
    answer beside its steps) is no reply. Every such pair: several are ambiguous."""
    if len(lists) != 1 or not assistant_waits(record[lists[0]]):
        return []
    candidates = []
    for key, value in record.items():
        if key == lists[0] or not isinstance(key, str):
            continue
        named = key.lower().replace("-", "_")
        if _REFERENCE_NAME.search(named):
            continue
        body = isinstance(value, dict) and (choice_messages(value) is not None or assistant_like(value))
        text = isinstance(value, str) and value.strip() != "" and _REPLY_NAME.search(named) is not None
        if text and _BARE_ANSWER.fullmatch(named) and not record.keys() & _MODEL_EVIDENCE:
            continue  # a prompt dataset's reference answer (GRPO / verifiers rows, GSM8K): no model wrote it
        if body or text:
            candidates.append(key)
    logged = [said(m) for m in record[lists[0]]]  # as JSON: a text is looked for as JSON writes it in them

    def summed_up(value: Any) -> bool:  # a text the messages already say (a run's answer, its last tool's output)
        return isinstance(value, str) and any(json.dumps(value.strip(), ensure_ascii=False)[1:-1] in t for t in logged)

    return [(lists[0], key) for key in candidates if not summed_up(record[key])]


def assistant_waits(messages: list[Any]) -> bool:
    """Whether a message list ends with a message the assistant has yet to answer (a user's, a tool's result)."""
    last = role_of(messages[-1]) if messages else None
    return last is not None and canonical_role(last[1]) in ("user", "tool")


def _suffixed_pairs(record: dict[str, Any]) -> list[tuple[str, str]]:
    """``raw_input_<step>`` + ``raw_output_<step>`` pairs: what a distilabel pipeline step sent its model and the text
    it got back (``distilabel_metadata``), the exact context of the generation beside it."""
    return [
        (key, f"raw_output_{key[len('raw_input_') :]}")
        for key in record
        if isinstance(key, str) and key.startswith("raw_input_") and f"raw_output_{key[len('raw_input_') :]}" in record
    ]


def _replies(value: Any) -> bool:
    if isinstance(value, dict) and choice_messages(value) is not None:
        return True
    if text_samples(value):
        return True
    return isinstance(value, str) or is_message_list(value) or (isinstance(value, dict) and is_message_like(value))


def _empty_json(text: str) -> bool:
    """Whether a text is the JSON of an empty value: a JSON column left empty (LiteLLM's spend logs write ``"{}"`` for
    the messages and the response of a request whose prompts they do not store), not a prompt anyone sent. Only a
    context is judged so: a *reply* of ``"[]"`` or ``"{}"`` is what a model answers when nothing fits (extraction
    rows, tool choice rows), and is trained as the text it is."""
    return text.strip() in ("{}", "[]", "null", '""')


def _system_text(record: dict[str, Any], key: str) -> bool:
    """Whether ``key`` holds a system prompt: text, or text blocks."""
    value = dig(record, key)
    return (isinstance(value, str) and value.strip() != "") or text_blocks(value) is not None


def _prompt_like(value: Any) -> bool:
    """A context: text or a message list. An empty one is not (the context is elsewhere, e.g. CAMEL's
    ``{"instruction", "instances": [{"input": "", "output"}]}``: reading ``input`` as the prompt would train the
    output after a context the policy never saw)."""
    return (isinstance(value, str) and value.strip() != "" and not _empty_json(value)) or is_message_list(value)


def _assistant_count(value: Any, budget: list[int] | None = None) -> int:
    """How many assistant-like messages ``value`` holds anywhere (bounded search)."""
    budget = budget if budget is not None else [MAX_SEARCH_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        return 0
    if isinstance(value, list):
        return sum(_assistant_count(v, budget) for v in value if isinstance(v, dict | list))
    if not isinstance(value, dict):
        return 0
    own = 0
    hit = role_of(value)
    if hit is not None and canonical_role(hit[1]) in ("assistant", "call"):
        own = 1
        if is_wrapper(value):
            return own
    return own + sum(_assistant_count(v, budget) for v in value.values() if isinstance(v, dict | list))


def _prompt_beside(record: dict[str, Any], key: str) -> str | None:
    """The key of a string prompt beside the message list ``record[key]`` when that list holds replies, calls and
    results only (what a run produced, not what it was sent): the list's own context, or None."""
    prompt = next((k for k in _STRING_PROMPT_KEYS if isinstance(record.get(k), str) and record[k].strip()), None)
    if prompt is None or prompt == key:
        return None
    roles = []
    for item in record[key]:
        hit = role_of(item)
        roles.append(canonical_role(hit[1]) if hit is not None else None)
    if not any(r in ("assistant", "call") for r in roles):
        return None
    return prompt if all(r in ("assistant", "call", "tool", "thought") for r in roles) else None


# How tracers mark a record that is a tool's run (its input the call's arguments, its output the result): the OpenAI
# Agents SDK's span_data.type, LangSmith's run_type, OpenInference's span_kind, Langfuse's observation types.
_TOOL_RUN_KEYS = ("type", "run_type", "span_kind", "observation_type")
_TOOL_RUN_KINDS = frozenset({"function", "tool", "execute_tool"})


def _runs_a_tool(record: dict[str, Any]) -> bool:
    """Whether ``record`` says it is a tool's run, whose ``input`` / ``output`` are no prompt and reply."""
    return any(isinstance(record.get(k), str) and record[k].strip().lower() in _TOOL_RUN_KINDS for k in _TOOL_RUN_KEYS)


_MAX_ITEMS_LOOKED_AT = 64  # items of a list looked at for the calls a record's own pair sums up


def _sums_up_calls_below(record: dict[str, Any], hit: Found) -> bool:
    """Whether a record's own prompt / completion pair is a summary of calls its items hold: a trace (Langfuse's
    ``{input, output, observations: [...]}``, a parent span beside its children) logs the run's input and its final
    output, and one of the calls below it sampled that same output after more messages. Then the calls below are
    the record's conversation, and its own pair one more copy of the last reply (see
    :func:`msgtrain.ingest.structure.structural_calls.summaries_kept_as_context`)."""
    if hit.mapping.layout != "prompt_completion":
        return False
    reply = _reply_said(dig(hit.holder, hit.mapping.columns["completion"]))
    for key, value in record.items():
        if key in hit.mapping.columns.values() or not isinstance(value, list) or is_message_list(value):
            continue
        for item in value[:_MAX_ITEMS_LOOKED_AT]:
            if not isinstance(item, dict):
                continue
            below = record_layout(item, "$")
            if not isinstance(below, Found) or below.mapping.layout != "prompt_completion":
                continue
            if _reply_said(dig(below.holder, below.mapping.columns["completion"])) == reply:
                return True
    return False


def _reply_said(value: Any) -> str:
    """What a logged reply says, however it is logged (a text, the message, a response body's first choice): a
    trace's output is often the text its last call's message holds."""
    choices = choice_messages(value) if isinstance(value, dict) else None
    return said(choices[0] if choices else value)
