"""What the structural reader's search finds, and the shapes of values it judges by.

A :class:`Found` is one conversation: the object around it (``holder``), the JSON path to it, and the
:class:`~msgtrain.ingest.structure.mapping.Mapping` that reads it; an :class:`Ambiguity` is a spot holding
message-like content no layout reads unambiguously, with the assistant messages that reject costs the books.

Invariants:
- ``Found.mapping.columns`` name keys (or dotted paths) of ``Found.holder``; ``Found.inherited`` holds only what the
  holder does not map itself (the system prompt, tools an ancestor keeps for it), each with its JSON path.
- The predicates here only look at a value: they never raise and never change it, so the search, detection and the
  conversion judge a value the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msgtrain.ingest.common.message_like import (
    canonical_role,
    content_key_of,
    is_message_like,
    is_message_list,
    role_of,
    unwrapped,
)
from msgtrain.ingest.core.base import SourceRef
from msgtrain.ingest.structure.mapping import Mapping


@dataclass
class Found:
    """A conversation found in a record: where (``path``), in which ``layout``, read through ``mapping``
    (``mapping.columns`` are keys of ``holder``, the object around the conversation)."""

    path: str
    holder: dict[str, Any]
    mapping: Mapping
    node_map: bool = (
        False  # ``mapping.columns["messages"]`` is a node map (msgtrain.ingest.structure.node_maps), not a list
    )
    # the system prompt and tools an ancestor of ``holder`` keeps for it: {"system" | "tools": (JSON path, value)}
    inherited: dict[str, tuple[str, Any]] = field(default_factory=dict)
    unlogged_system: bool = False  # the log format never saves the system message its agent was sent
    # how a preference pair's two sides are judged: chosen / rejected, or a judge's tie (both good, both bad)
    marks: tuple[str | None, str | None] = ("chosen", "rejected")
    # ``holder`` is one text a chat template rendered, cut into its prompt and its reply (no --map form reads it)
    rendered: bool = False
    # ``holder``'s messages are the tree rebuilt from branches kept beside its list (:func:`forks_tree`; no --map
    # form reads them)
    forked: bool = False
    # one of the threads of a chat session that keeps its older threads beside its messages (:func:`session_threads`;
    # no --map form reads them)
    threaded: bool = False
    # ``holder`` is assembled from several places of the record (a scored candidate or sample beside the prompt it
    # answers and its score), not an object of it: no --map form reads it
    assembled: bool = False
    # the score a list beside the conversation's own list gives it, item for item (:func:`parallel_scores`): its reward
    reward: float | None = None
    # the replies every rollout of its scored group holds before they diverge (:func:`group_history`): the history
    # the group was started from, context in each rollout
    history_replies: int = 0
    # the JSON path of the list of rollouts sampled from one context that the conversation is one of (a scored
    # group, n samples of one prompt): the rollouts of one such list share their ``group_id``
    group: str | None = None


@dataclass
class Ambiguity:
    """A spot that holds message-like content no layout reads unambiguously."""

    path: str
    message: str
    assistant_messages: int


TREE_KEYS = ("children", "replies")


def tree_key(value: Any) -> str | None:
    """The key under which the messages of ``value`` (a message list) nest their replies as message lists (chat UI
    exports' ``children``, OpenAssistant's ``replies``), or None."""
    if not is_message_list(value):
        return None
    return next((k for k in TREE_KEYS if any(is_message_list(m.get(k)) for m in value)), None)


# Keys under which a chat UI keeps every version of one message (LM Studio's ``versions``: a regenerated reply, an
# edited prompt), and the keys naming the version shown, whose history the messages after it continue.
VERSION_KEYS = ("versions",)
SELECTED_VERSION_KEYS = ("currentlySelected", "selected", "selectedVersion", "current")


def versions_tree(value: Any, key: str = "children") -> list[Any] | None:
    """A list of version holders (each ``{"versions": [message, ...], "currentlySelected": i}``) as the message tree
    it stands for: the versions of one holder are siblings after the same history (a regenerated reply is a reply
    sampled in the context its sibling saw, an edited prompt another branch), and the holders after it continue the
    version shown (the selected one; the last when no key names one), under ``key``. None when ``value`` is not
    such a list (an item that is a message itself, holds no message versions, or a version that nests messages)."""
    if not isinstance(value, list) or not value:
        return None
    levels: list[tuple[list[Any], int]] = []
    for item in value:
        if not isinstance(item, dict) or is_message_like(item):
            return None
        held = next((k for k in VERSION_KEYS if isinstance(item.get(k), list) and item[k]), None)
        if held is None:
            return None
        versions = item[held]
        if not all(is_message_like(v) and key not in v and not any(k in v for k in TREE_KEYS) for v in versions):
            return None
        chosen = next((item[k] for k in SELECTED_VERSION_KEYS if type(item.get(k)) is int), len(versions) - 1)
        if not 0 <= chosen < len(versions):
            return None
        levels.append((versions, chosen))
    below: list[Any] = []
    for versions, chosen in reversed(levels):
        below = [{**v, key: below if i == chosen else []} for i, v in enumerate(versions)]
    return below if is_message_list(below) else None


# Keys under which a chat UI keeps the other branches of its conversation by the message they fork after (Chatbox's
# ``messageForksHash``: ``{<message id>: {"position": i, "lists": [{"messages": [...]}, ...]}}``); the branch shown
# (``lists[position]``, kept empty) is the message list's own continuation after that message.
FORK_KEYS = ("messageForksHash",)
FORK_POSITION_KEYS = ("position",)


def forks_tree(record: dict[str, Any], messages_key: str = "messages", key: str = "children") -> list[Any] | None:
    """``record[messages_key]`` with the branches ``record`` keeps beside it (:data:`FORK_KEYS`) as the message tree
    they stand for: after a fork message, its continuation in the list and each saved branch's messages are sibling
    subtrees (a regenerated reply, an edited follow-up: each sampled after the same history), nested under ``key``;
    a message of a saved branch may fork again. None when ``record`` keeps no such branches, or keeps branches that
    do not fit the list (an entry of the wrong shape, a fork message in no branch, a shown branch's slot that is not
    empty): those are left to the search, which refuses them as ambiguous rather than lose a branch."""
    trees = forks_trees(record, [record.get(messages_key)], key)
    return trees[0] if trees is not None else None


def forks_trees(record: dict[str, Any], lists: list[Any], key: str = "children") -> list[list[Any] | None] | None:
    """:func:`forks_tree` over several message lists that share ``record``'s branches (a Chatbox session's messages
    and its older threads: its ``messageForksHash`` keys the messages of each): per list, its tree, or None for a
    list no saved branch forks from. None when ``record`` keeps no branches, or a saved branch forks from a message
    in none of the lists."""
    forks = next((record[k] for k in FORK_KEYS if isinstance(record.get(k), dict) and record[k]), None)
    if forks is None or not lists or not all(isinstance(m, list) and is_message_list(m) for m in lists):
        return None
    branches: dict[str, list[list[Any]]] = {}
    for pivot, entry in forks.items():
        held_lists = entry.get("lists") if isinstance(entry, dict) else None
        shown = next((entry[k] for k in FORK_POSITION_KEYS if type(entry.get(k)) is int), None) if held_lists else None
        if not isinstance(held_lists, list) or shown is None or not 0 <= shown < len(held_lists):
            return None
        held = [item.get("messages") if isinstance(item, dict) else None for item in held_lists]
        if not all(isinstance(m, list) for m in held) or held[shown]:
            return None
        branches[str(pivot)] = [m for i, m in enumerate(held) if i != shown and m]
    used: set[str] = set()
    out: list[list[Any] | None] = []
    for messages in lists:
        roots: list[Any] = []
        here: set[str] = set()
        stack: list[tuple[list[Any], list[Any]]] = [(list(messages), roots)]  # (a run of messages, where it hangs)
        while stack:
            run, into = stack.pop()
            for item in run:
                if not isinstance(item, dict):
                    return None
                node = {**item, key: []}
                into.append(node)
                saved = branches.get(str(item.get("id")), [])
                if saved:
                    here.add(str(item.get("id")))
                stack.extend((branch, node[key]) for branch in reversed(saved))
                into = node[key]
        used |= here
        out.append(roots if here else None)
    return out if used == {p for p, b in branches.items() if b} else None


# Keys under which a chat session keeps its older threads beside its current messages (Chatbox's ``threads``:
# ``[{id, name, messages, createdAt}]``, each a topic the user closed to start a new one, its messages as they were
# sent, its system prompt among them; the new thread starts again from the system prompt): each its own conversation.
THREAD_KEYS = ("threads",)


def session_threads(record: dict[str, Any], messages_key: str = "messages") -> tuple[str, list[dict[str, Any]]] | None:
    """(key, threads) of the older threads ``record`` keeps beside its message list (:data:`THREAD_KEYS`), or None."""
    if not any(isinstance(record.get(key), list) for key in THREAD_KEYS):
        return None  # the usual record: its messages are not looked at twice
    if not is_message_list(record.get(messages_key)):
        return None
    for key in THREAD_KEYS:
        threads = record.get(key)
        if (
            isinstance(threads, list)
            and threads
            and all(isinstance(t, dict) and isinstance(t.get(messages_key), list) for t in threads)
        ):
            return key, threads
    return None


def nested_runs(record: dict[str, Any], messages_key: str = "messages") -> list[str]:
    """Keys of the lists beside ``record``'s message list whose items are runs of their own, each holding its own
    message list that does not open with the record's (Agno's ``member_responses``: the runs of a team's members, each
    sent its own system prompt and the task the leader gave it): each a conversation of its own, read after the
    record's, never replies beside it that no one can place."""
    own = record.get(messages_key)
    if not any(isinstance(v, list) and v and isinstance(v[0], dict) and messages_key in v[0] for v in record.values()):
        return []  # the usual record: no list of records that hold messages
    if not isinstance(own, list) or not is_message_list(own):
        return []
    return [
        key
        for key, items in record.items()
        if key != messages_key
        and key not in THREAD_KEYS
        and isinstance(items, list)
        and items
        and all(
            isinstance(t, dict)
            and is_message_list(t.get(messages_key))
            and not is_prefix(own, t[messages_key])
            and _own_run(t, t[messages_key])
            for t in items
        )
    ]


# Keys by which an item names the run or the agent it is (Agno's RunOutput: run_id, agent_id, agent_name)
_RUN_NAMES = ("run_id", "agent_id", "agent_name", "member_id")


def _own_run(item: dict[str, Any], messages: list[Any]) -> bool:
    """Positive evidence that an item beside a record's messages is a run of its own, sent what its list holds: it
    names its run or agent, or its list opens with its own system prompt. A follow-up kept beside the messages (its
    list opens at the next user turn) has neither: its replies were sampled after a history it does not hold."""
    if any(isinstance(item.get(k), str) and item[k] for k in _RUN_NAMES):
        return True
    hit = role_of(messages[0])
    return hit is not None and canonical_role(hit[1]) == "system"


# Keys of a list of numbers that scores, item for item, the conversations of a list beside it (Atropos's scored
# groups: ``scores`` beside ``messages``, one score per rollout; a group's ``rewards``).
SCORE_LIST_KEYS = ("scores", "rewards")


def parallel_scores(record: dict[str, Any], key: str) -> list[float] | None:
    """The scores ``record`` keeps for the items of ``record[key]``, one number per item in its order (a key of
    :data:`SCORE_LIST_KEYS` whose list is as long as ``record[key]``), or None."""
    items = record.get(key)
    if not isinstance(items, list) or not items or key in SCORE_LIST_KEYS:
        return None
    for name in SCORE_LIST_KEYS:
        scores = record.get(name)
        if (
            isinstance(scores, list)
            and len(scores) == len(items)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in scores)
        ):
            return [float(v) for v in scores]
    return None


def group_history(rollouts: list[list[Any]]) -> int:
    """How many replies the rollouts of one scored group (message lists sampled from one start, each scored) all hold,
    word for word, before they first differ, and before the last reply of each: the history the group was started
    from (a multi-step environment sends each step's group the steps chosen before it), which no rollout of the
    group sampled. 0 for a single rollout."""
    if len(rollouts) < 2:
        return 0
    lasts = [max((i for i, m in enumerate(r) if assistant_like(m)), default=0) for r in rollouts]
    first, others = rollouts[0], rollouts[1:]
    shared = 0
    while shared < min(lasts) and all(same_value(first[shared], r[shared]) for r in others):
        shared += 1
    return sum(assistant_like(m) for m in first[:shared])


def same_value(a: Any, b: Any) -> bool:
    """Whether two logged values are the same, kind for kind: ``1``, ``1.0`` and ``true`` differ (as their JSON texts
    do), and so do a date a YAML log holds and the text of that date; the order of an object's keys does not matter.
    Compared in place, stopping at the first difference: nothing is serialised."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)  # NaN is the same NaN, as its JSON text is


# A chat history saved as [user text, reply text] pairs (text-generation-webui's ``internal`` / ``visible``, Gradio
# chatbots): of two such lists of the same exchanges, the one named here is what the model was sent (the other the
# page's rendering of it).
MODEL_SIDE_KEYS = ("internal",)
# What a writer puts in a pair's user side when no user spoke (text-generation-webui's greeting row): the reply is
# the character's scripted greeting, context the model never sampled.
NO_USER_MARKERS = frozenset({"", "<|BEGIN-VISIBLE-CHAT|>"})


def is_pair_history(value: Any) -> bool:
    """A non-empty list of [user text, reply text] pairs (at least one with a user text)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) for t in p) for p in value)
        and any(p[0] not in NO_USER_MARKERS for p in value)
    )


def pair_history_key(record: dict[str, Any]) -> str | None:
    """The key of ``record`` holding its conversation as [user, reply] pairs: the one such list, or of several
    renderings of the same exchanges (equal lengths) the one the model was sent (:data:`MODEL_SIDE_KEYS`); None when
    there is none or which one is not known."""
    keys = [k for k, v in record.items() if is_pair_history(v)]
    if len(keys) == 1:
        return keys[0]
    if len({len(record[k]) for k in keys}) == 1:
        return next((k for k in MODEL_SIDE_KEYS if k in keys), None)
    return None


def is_prefix(short: list[Any], long: list[Any]) -> bool:
    """``short`` says what the start of ``long`` says (same roles and contents, in order)."""

    def said(message: Any) -> tuple[Any, Any]:
        hit = role_of(message)
        # the content of the message a wrapper holds (LlamaIndex's blocks, LangChain's data, ...): the key names the
        # unwrapped message's content; without one, the whole message is what it says, never "nothing" (two chats
        # alike in roles alone are not one chat's prefix)
        inner = unwrapped(message)
        key = content_key_of(inner)
        return (hit[1] if hit else None), (inner.get(key) if key is not None else inner)

    return len(short) <= len(long) and all(
        a[0] == b[0] and same_value(a[1], b[1]) for a, b in zip(map(said, short), map(said, long), strict=False)
    )


def text_samples(value: Any) -> bool:
    """A list of generated texts for one context (OpenAI evals' ``sampled``, n > 1 completions; HELM's and legacy
    completions APIs' ``[{"text": ...}]``)."""
    return isinstance(value, list) and bool(value) and all(sample_text(v) is not None for v in value)


def sample_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str) and role_of(value) is None:
        return value["text"]
    return None


# (list key, message key) of a response body's samples: OpenAI's choices, Gemini's candidates
SAMPLE_LISTS = (("choices", "message"), ("candidates", "content"))


def choice_messages(value: dict[str, Any]) -> list[Any] | None:
    """The reply of a response body logged as a completion: OpenAI's (``{"choices": [{"message": ...}]}``) or
    Gemini's (``{"candidates": [{"content": {"role": "model", "parts"}}]}``)."""
    for key, inner in SAMPLE_LISTS:
        samples = value.get(key)
        if not (isinstance(samples, list) and samples and all(isinstance(c, dict) for c in samples)):
            continue
        messages = [c.get(inner) for c in samples]
        if all(isinstance(m, dict) and is_message_like(m) for m in messages):
            return messages
    return None


def assistant_like(value: Any) -> bool:
    hit = role_of(value)
    return hit is not None and canonical_role(hit[1]) in ("assistant", "call")


# (id key, parent key) of messages logged one per line as a tree (OpenAssistant rows, chat UIs' exports).
_TREE_KEYS = (
    ("messageId", "parentMessageId"),  # LibreChat exports
    ("id", "parentMessageId"),
    ("message_id", "parent_id"),
    ("user_message_id", "parent_message_id"),
    ("message_id", "parent_message_id"),
    ("id", "parent_message_id"),
    ("id", "parent_id"),
    ("id", "parentId"),
    ("id", "parent"),
    ("uuid", "parentUuid"),
)
Lines = list[tuple[SourceRef, dict[str, Any]]]


def link_keys(lines: Lines) -> tuple[str, str] | None:
    """The (id, parent) keys of message rows that form a tree: every row has the id, some have a parent."""
    return next(
        (k for k in _TREE_KEYS if all(k[0] in v for _, v in lines) and any(v.get(k[1]) for _, v in lines)), None
    )
