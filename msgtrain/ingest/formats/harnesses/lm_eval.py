"""EleutherAI lm-evaluation-harness per-sample logs: the ``samples_<task>_<date>.jsonl`` files ``--log_samples``
writes, one line per (document, filter): ``{doc_id, doc, target, arguments, resps, filtered_resps, filter,
metrics, doc_hash, prompt_hash, target_hash, <metric>: value}``.

``arguments`` holds the requests of the document, as ``{"gen_args_<i>": {"arg_0": context, "arg_1": ...}}``
(lm_eval.loggers.evaluation_tracker, v0.4.3 on) or as ``[[context, ...], ...]`` (earlier); ``resps`` holds each
request's outputs, one per repeat.

What is read:
- ``generate_until`` requests (``arg_1`` is the generation kwargs, an object): the model's generations. Their
  context is ``arg_0``. Chat models served through an API (``local-chat-completions``, ``openai-chat-completions``)
  log it as their message list encoded as JSON text: those messages are the context, and each generation of the
  request is a reply sampled in it (repeats are sibling replies of one context).
- The document's metrics (the names under ``metrics``) go to the rows' metadata; a single numeric one is the
  rows' reward. ``doc_id``, ``target``, ``filter`` and the task (from the file name) go to metadata too.

Safe readings:
- A context a chat template already rendered (``--apply_chat_template`` with a local model: ``<|im_start|>...``)
  is parsed back into its messages (:mod:`msgtrain.ingest.common.rendered_prompts`; the replies keep the logged text,
  the exact prompt); one whose markup is not unambiguous is rejected (``prerendered_prompt``): read as a message it
  would be rendered twice. A raw-text context (a base
  model's few-shot prompt) is rejected (``not_a_chat``): no chat template renders what that model saw. Both count
  the generations they held.
- Log-likelihood requests (multiple choice, perplexity: ``arg_1`` is a continuation, ``resps`` scores) hold no
  generation: skipped (``no_generation``).
- The harness logs one line per filter with the same generations: the first line of a document is read, the others
  are skipped (``same_generations_other_filter``) so a generation is never trained twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.content_parts import parse_json_field, rendered_template_text
from msgtrain.ingest.common.conversation_files import base_graph_id, content_graph_id, iter_raw_records
from msgtrain.ingest.common.message_like import is_message_list
from msgtrain.ingest.common.rendered_prompts import RENDERED_PROMPT_KEY, RenderedPrompt, parse_rendered_prompt
from msgtrain.ingest.common.shapes import normalise_messages
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    head_objects,
    quoted,
)
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.openai import from_openai_message

_TASK = re.compile(r"^samples_(?P<task>.+?)_\d{4}-\d{2}-\d{2}T[\d\-.:]+$")


class LmEvalReader:
    name = "lm_eval"
    description = "EleutherAI lm-evaluation-harness samples_<task>_<date>.jsonl (--log_samples): generations per doc"
    example = "sample_logs/lm_eval/samples_gsm8k_chat_2025-01-01T00-00-00.000000.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["doc_id"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        return any(_is_sample(o) for o in head_objects(head))

    def read(self, path: Path) -> Iterator[ReadItem]:
        seen: set[str] = set()
        for rec in iter_raw_records(path):
            if isinstance(rec.value, Exception):
                yield ReadReject(rec.ref, rec.value, excerpt(rec.raw or b""))  # type: ignore[arg-type]
                continue
            value = rec.value
            key = f"{value.get('doc_id')}|{value.get('doc_hash')}" if isinstance(value, dict) else None
            if key is not None and key in seen:
                yield ReadSkip(rec.ref, "same_generations_other_filter")
                continue
            if key is not None:
                seen.add(key)
            yield RecordTask(rec.ref, partial(_sample_events, path, rec.ref, value), raw=rec.raw or value)


def _is_sample(o: dict[str, Any]) -> bool:
    return "doc_id" in o and "arguments" in o and "resps" in o


def _requests(arguments: Any) -> list[list[Any]]:
    """The document's requests as argument lists, from either layout of ``arguments``."""
    if isinstance(arguments, dict):
        return [
            [args[k] for k in sorted(args, key=lambda k: int(k.rsplit("_", 1)[-1]))]
            for _, args in sorted(arguments.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[-1]))
            if isinstance(args, dict)
        ]
    if isinstance(arguments, list):
        return [a if isinstance(a, list) else [a] for a in arguments]
    return []


def _sample_events(path: Path, ref: SourceRef, rec: Any) -> list[ReadEvent]:
    if not isinstance(rec, dict) or not _is_sample(rec):
        raise ValidationError(
            "not an lm-evaluation-harness sample: it needs doc_id, arguments and resps",
            where=str(ref),
            code="bad_record",
        )
    requests = _requests(rec["arguments"])
    resps = rec["resps"] if isinstance(rec["resps"], list) else []
    generations = [
        (args[0], outputs if isinstance(outputs, list) else [outputs])
        for args, outputs in zip(requests, resps, strict=False)
        if len(args) >= 2 and isinstance(args[1], dict)  # generate_until: arg_1 is the generation kwargs
    ]
    if not generations:
        return [ReadSkip(ref, "no_generation")]
    events: list[ReadEvent] = []
    for k, (context, outputs) in enumerate(generations):
        where = f"{ref} $.arguments.gen_args_{k}.arg_0"
        texts = [o for o in outputs if isinstance(o, str)]
        if len(texts) != len(outputs):
            raise ValidationError(f"the outputs of request {k} are not text", where=str(ref), code="bad_record")
        rendered = parse_rendered_prompt(context)
        try:
            messages = rendered.messages if rendered is not None else _context(context, where)
        except MsgtrainError as e:  # the books count the generations the record held (text no estimate sees)
            turns = sum(len(o) for _, o in generations)
            return [ReadReject(ref, e, excerpt(json.dumps(rec, default=str)), turns=turns)]
        events.append(_graph(path, ref, rec, k, messages, texts, rendered))
    return events


def _context(context: Any, where: str) -> list[dict[str, Any]]:
    """The request's context as OpenAI messages (a JSON-encoded chat), else a reject saying why it is none."""
    decoded = parse_json_field(context, what="the request context", where=where) if _looks_like_json(context) else None
    if is_message_list(decoded):
        assert isinstance(decoded, list)
        return normalise_messages(decoded, where)[0]
    if isinstance(context, str) and rendered_template_text(context) is not None:
        raise ValidationError(
            f"the context is a prompt a chat template already rendered ({rendered_template_text(context)!r}): read "
            "as a message it would be rendered twice",
            where=where,
            code="prerendered_prompt",
            hint="run the harness with a chat API model (its context is logged as messages), or log token ids",
        )
    raise ValidationError(
        "the context is raw text (a base model's prompt), not a chat",
        where=where,
        code="not_a_chat",
        hint="msgtrain renders chats with a chat template; a raw-text prompt has no template to render",
    )


def _looks_like_json(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip().startswith("[")


def _graph(
    path: Path,
    ref: SourceRef,
    rec: dict[str, Any],
    k: int,
    messages: list[dict[str, Any]],
    texts: list[str],
    rendered: RenderedPrompt | None = None,
) -> ReadGraph:
    base = base_graph_id(path, ref) + (f"@{k}" if k else "")
    graph = MessageGraph(graph_id=base, metadata={"source_format": "lm_eval"})
    names: dict[str, str] = {}
    parent: str | None = None
    for i, data in enumerate(messages):
        msg = from_openai_message(data, index=i, call_names=names)
        origin = Origin.INJECTED if msg.role == "assistant" else None  # few-shot answers are context here
        parent = graph.append(msg, origin=origin)
    for j, text in enumerate(texts):  # repeats of one request: sibling replies sampled in the same context
        reply: dict[str, Any] = {"role": "assistant", "content": text}
        if rendered is not None:  # the prompt as the model saw it, and the reply without the stop the engine left
            reply = {**reply, "content": rendered.reply_text(text)}
        msg = from_openai_message(reply, index=len(messages) + j)
        if rendered is not None:
            msg = msg.model_copy(update={"metadata": {**msg.metadata, RENDERED_PROMPT_KEY: rendered.metadata()}})
        graph.add_node(parent, msg)
    graph.graph_id = content_graph_id(base, graph)
    return ReadGraph(graph, ref, records=1 if k == 0 else 0, extras=_extras(path, rec))


def _extras(path: Path, rec: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {k: rec[k] for k in ("doc_id", "target", "filter") if k in rec}
    task = _TASK.match(path.stem)
    if task:
        extras["task"] = task.group("task")
    names = rec.get("metrics")
    metrics = {n: rec[n] for n in names if isinstance(n, str) and n in rec} if isinstance(names, list) else {}
    if metrics:
        extras["metrics"] = metrics
    numeric = [v for v in metrics.values() if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numeric) == 1:
        extras["reward"] = float(numeric[0])
    return extras


READER = LmEvalReader()
