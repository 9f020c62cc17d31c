"""FastChat MT-bench and Arena-Hard model answers, read with the questions they answer.

``gen_model_answer`` / ``gen_api_answer`` write ``data/<bench>/model_answer/<model>.jsonl``: one line per question,
``{question_id, answer_id, model_id, choices: [{index, turns: [reply, ...]}], tstamp}`` (Arena-Hard v0.1 writes each
reply as ``{"content", "token_len"}``). The questions are in ``data/<bench>/question.jsonl``: ``{question_id,
category, turns: [question, ...]}``. An answer line alone holds replies without the questions they answer.

Invariants:
- An answer file is read with the ``question.jsonl`` of its own folder or of its parent (FastChat's layout), joined by
  ``question_id``, reached through the storage interface (:mod:`msgtrain.ingest.core.files`), so a bucket gives the rows
  the disk gives. The question file is the answer file's *partner* (:meth:`MtBenchReader.partners`): its bytes are
  in the part's key, so after changing only questions ``--resume`` converts the answers again, as a clean run does.
  A choice is one conversation: question 1, reply 1, question 2, reply 2, ... (the harness asks
  each question after the previous reply, in one conversation); several choices of one question are sibling
  conversations. Each reply is ``sampled`` in the context before it.
- The harness sends the system message of the model's conversation template, which neither file logs: every graph
  is marked ``context_incomplete`` (``system_prompt``; supply it with ``--system-prompt``).
- A question file's lines are skips (``benchmark_question``): questions hold no reply.
- Nothing is joined on a guess: an answer whose question is in no question file there is a reject
  (``batch_request_missing``: its replies are counted lost), as is one with more replies than its question has turns
  (``ambiguous_structure``). A reply the harness logged as ``$ERROR$`` (the API call failed) was never sampled: it
  stays in the context the next question was asked in, ``carried``, never trained.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.conversation_files import base_graph_id, content_graph_id
from msgtrain.ingest.core.base import head_mostly
from msgtrain.ingest.core.files import Beside, input_files
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    head_objects,
    iter_json_lines,
    quoted,
    read_head,
)
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.openai import from_openai_message

QUESTION_FILE = "question.jsonl"
API_ERROR = "$ERROR$"  # what FastChat's gen_api_answer writes for a call that failed


def _text(turn: Any) -> str | None:
    """A question or reply turn: a string, or Arena-Hard's ``{"content": ...}``."""
    if isinstance(turn, str):
        return turn
    if isinstance(turn, dict) and isinstance(turn.get("content"), str):
        return turn["content"]
    return None


def is_answer(value: Any) -> bool:
    """An MT-bench / Arena-Hard model answer line."""
    if not isinstance(value, dict) or "question_id" not in value:
        return False
    choices = value.get("choices")
    return (
        isinstance(choices, list)
        and bool(choices)
        and all(isinstance(c, dict) and isinstance(c.get("turns"), list) for c in choices)
    )


def is_question(value: Any) -> bool:
    """A line of a benchmark's question file: ``{question_id, turns: [question, ...]}``, no replies."""
    if not isinstance(value, dict) or "question_id" not in value or "choices" in value:
        return False
    turns = value.get("turns")
    return isinstance(turns, list) and bool(turns) and all(_text(t) is not None for t in turns)


def _question_files(location: PurePosixPath) -> list[PurePosixPath]:
    """Where the questions of the answer file at ``location`` may be: its folder's, then its parent's."""
    folder = location.parent
    return [folder / QUESTION_FILE, folder.parent / QUESTION_FILE]


def _questions(path: Path) -> tuple[dict[str, list[str]], PurePosixPath | None]:
    """The questions by ``question_id`` from the question file beside the answer file at ``path`` or one folder up,
    and that file's location, read through the storage interface (the disk, or the store the input came from)."""
    files = input_files()
    for where in _question_files(files.location(path)):
        with files.kept_copy(path, where) as local:
            if local is None:
                continue
            found: dict[str, list[str]] = {}
            for _lineno, _raw, value in iter_json_lines(local):
                if isinstance(value, dict) and "question_id" in value and isinstance(value.get("turns"), list):
                    texts = [_text(t) for t in value["turns"]]
                    if all(t is not None for t in texts):
                        found[str(value["question_id"])] = [t for t in texts if t is not None]
            return found, where
    return {}, None


class MtBenchReader:
    name = "mt_bench"
    description = (
        "FastChat MT-bench / Arena-Hard model answers (model_answer/<model>.jsonl), joined by question_id with the"
        " question.jsonl beside them or one folder up"
    )
    example = "sample_logs/mt_bench/model_answer/demo-model.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["question_id"]))
    # What partners needs to return any file (its location, its head).
    partner_marks = Marks(texts=quoted(["question_id"]))  # is_answer

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        return head_mostly(head, is_answer) or head_mostly(head, is_question)

    def partners(self, location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
        """The question file an answer file is read with: its folder's, else its parent's (the first that is there,
        and the absent ones looked at before it: a question file that arrives beside the answers takes over)."""
        if location.name == QUESTION_FILE or not any(map(is_answer, head_objects(beside.head(location)))):
            return []
        declared: list[PurePosixPath] = []
        for where in _question_files(location):
            declared.append(where)
            if where in beside.listing(where.parent):
                break
        return declared

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if path.name == QUESTION_FILE or not any(map(is_answer, head_objects(read_head(path)))):
            yield from _question_skips(path)
            return
        questions, source = _questions(path)
        for lineno, raw, value in iter_json_lines(path):
            ref = SourceRef(str(path), f"line {lineno}")
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw))
                continue
            try:
                yield self._graph(path, ref, value, questions, source)
            except MsgtrainError as e:
                turns = sum(len(c.get("turns") or []) for c in value.get("choices") or [] if isinstance(c, dict))
                yield ReadReject(ref, e if e.where else e.located(str(ref)), excerpt(raw), turns=max(turns, 1))

    def _graph(
        self, path: Path, ref: SourceRef, value: Any, questions: dict[str, list[str]], source: PurePosixPath | None
    ) -> ReadGraph:
        if not is_answer(value):
            raise ValidationError("not a model answer line ({question_id, choices: [{turns}]})", code="bad_record")
        asked = questions.get(str(value["question_id"]))
        if asked is None:
            where = f"in {source}" if source is not None else f"no {QUESTION_FILE} in {path.parent} or its parent"
            raise ValidationError(
                f"question_id {value['question_id']!r} is not among the questions ({where}): the replies' context is "
                "not in the files",
                code="batch_request_missing",
                hint=f"keep the benchmark's {QUESTION_FILE} beside the model_answer folder, as FastChat writes it",
            )
        graph = MessageGraph(graph_id=base_graph_id(path, ref), metadata={"source_format": self.name})
        for c, choice in enumerate(value["choices"]):
            replies = [_text(t) for t in choice["turns"]]
            if any(r is None for r in replies) or len(replies) > len(asked):
                raise ValidationError(
                    f"choices[{c}] holds {len(replies)} replies to {len(asked)} questions, or a reply that is not "
                    "text: which question each answers is ambiguous",
                    code="ambiguous_structure",
                )
            parent: str | None = None
            for k, reply in enumerate(replies):
                parent = graph.add_node(parent, from_openai_message({"role": "user", "content": asked[k]}))
                message = from_openai_message({"role": "assistant", "content": reply}, index=2 * k + 1)
                origin = Origin.CARRIED if reply == API_ERROR else Origin.SAMPLED
                parent = graph.add_node(parent, message, origin=origin)
        mark_context_incomplete(
            graph, ["system_prompt"], "the answers do not log the system message of the model's conversation template"
        )
        graph.graph_id = content_graph_id(graph.graph_id, graph)
        extras = {k: value[k] for k in ("question_id", "answer_id", "model_id") if k in value}
        return ReadGraph(graph, ref, records=1, extras=extras)


def _question_skips(path: Path) -> Iterator[ReadEvent]:
    """A question file's lines: questions hold no reply to train (their answers are read with them)."""
    for lineno, raw, value in iter_json_lines(path):
        ref = SourceRef(str(path), f"line {lineno}")
        if isinstance(value, MsgtrainError):
            yield ReadReject(ref, value, excerpt(raw))
        elif is_question(value):
            yield ReadSkip(ref, "benchmark_question")
        else:
            error = ValidationError("not a benchmark question line ({question_id, turns})", code="bad_record")
            yield ReadReject(ref, error.located(str(ref)), excerpt(raw))


READER = MtBenchReader()
