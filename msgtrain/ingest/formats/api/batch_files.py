"""Batch API files: OpenAI Batch input / output JSONL and Anthropic Message Batches requests / results, joined by
``custom_id``.

A batch job is a generation-call log cut in two files: the *input* file (one request per line: OpenAI
``{custom_id, method, url, body}``, the same for Mistral / Groq / Together; Anthropic ``{custom_id, params}``) and
the *output* file the provider returns (OpenAI ``{id, custom_id, response: {status_code, body}, error}``; Anthropic
``{custom_id, result: {type, message | error}}``). An output line alone is a reply without its context; the two
together are a complete call log: the exact context of each reply is its request's body.

Invariants:
- An output file is read with the batch input files of its own folder (every sibling file whose records are batch
  requests), listed and read through the storage interface (:mod:`msgtrain.ingest.core.files`), so a bucket gives the
  rows the disk gives. Those files are the output's *partners* (:meth:`BatchReader.partners`), and an input file's
  are the folder's output files (they say which of its requests were answered): their bytes are in the part's key,
  so changing either side converts again, under ``--resume`` as in a clean run, exactly the parts that used it.
- The folder's requests (where each is, not the bodies) and answered ids are indexed once per folder and run, in
  an SQLite file the run's workers share (:meth:`msgtrain.ingest.core.files.InputFiles.shared_index`), and a store's
  input file is copied once per run: N batch files cost O(N) index work, not N × N.
  Each result line is joined to the request line of the same ``custom_id`` and read as that
  endpoint's call (``url``: chat completions, Responses, Anthropic Messages, as the cassette reader reads them);
  calls group into conversations like any call log (:class:`~msgtrain.ingest.common.call_log.CallLogGroups`).
- Nothing is joined on a guess: a ``custom_id`` no input file of the folder holds is a ``batch_request_missing``
  reject (the reply is lost, and counted); one that two input files hold with different requests is an
  ``ambiguous_structure`` reject naming both.
- A failed request (OpenAI ``error`` or a non-2xx ``status_code``, Anthropic ``errored`` / ``expired`` /
  ``canceled``) generated nothing: a skip (``error_response``). A request to an endpoint that generates nothing
  (embeddings, moderation) is a skip (``not_a_generation_call``); one to a generation endpoint no reader reads is
  an ``unsupported_api`` reject.
- Gemini Batch API files join alike, by ``key``: requests ``{key, request: {contents, ...}}``, results ``{key,
  response: {candidates, usageMetadata}}`` (or an ``error``: a skip).
- An Amazon Bedrock batch output (``{recordId, modelInput, modelOutput}``, a ``.jsonl.out`` file) holds request and
  answer in each line: each is read as the InvokeModel call it was (Anthropic Messages or Nova bodies); a record
  with an ``error`` instead of an output is an ``error_response`` skip.
- An input file's lines are skips, never graphs: ``batch_request_answered`` when an output file of its folder
  holds the reply (the call is read and counted there), ``batch_request_unanswered`` otherwise (a request holds no
  reply to train; put the output file beside it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGroups
from msgtrain.ingest.common.message_like import message_like_count
from msgtrain.ingest.core.base import LongLine, head_mostly, line_size, open_input, read_bounded_line
from msgtrain.ingest.core.files import Beside, InputFiles, input_files
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    head_objects,
    iter_json_lines,
    quoted,
    read_head,
)
from msgtrain.ingest.formats.api import anthropic, openai_responses
from msgtrain.ingest.formats.api.cassettes import endpoint_of, gemini_call, invoke_call, openai_chat_call
from msgtrain.ingest.formats.api.text_completions import is_text_completion, text_completion_call

BATCH_SUFFIXES = (".jsonl", ".json", ".ndjson")
# Endpoints that take a message-like body but generate no turn.
_NOT_GENERATION = ("embeddings", "moderations")
# Anthropic result types of a request that generated nothing.
_FAILED_RESULTS = frozenset({"errored", "expired", "canceled"})


def join_id(value: Any) -> str | None:
    """The id a batch line is joined by: ``custom_id`` (OpenAI, Anthropic, Mistral...) or Gemini's ``key``."""
    if not isinstance(value, dict):
        return None
    found = value.get("custom_id", value.get("key"))
    return str(found) if isinstance(found, str | int) and not isinstance(found, bool) else None


def _gemini_line(value: dict[str, Any], part: str, fields: tuple[str, ...]) -> bool:
    """A Gemini Batch API line: ``{key, request: {contents}}`` or ``{key, response: {candidates | error}}``."""
    body = value.get(part)
    return "key" in value and "custom_id" not in value and isinstance(body, dict) and any(f in body for f in fields)


def is_batch_request(value: Any) -> bool:
    """A line of a batch input file: OpenAI ``{custom_id, url, body}``, Anthropic ``{custom_id, params}``, Gemini
    ``{key, request: {contents}}``."""
    if join_id(value) is None:
        return False
    if _gemini_line(value, "request", ("contents",)):
        return True
    body = value.get("body") if "url" in value else value.get("params")
    return "custom_id" in value and isinstance(body, dict)


def is_bedrock_record(value: Any) -> bool:
    """A line of an Amazon Bedrock batch inference output (``<input>.jsonl.out``): ``{recordId, modelInput,
    modelOutput | error}``, the request and its answer in one line."""
    return (
        isinstance(value, dict)
        and "recordId" in value
        and isinstance(value.get("modelInput"), dict)
        and (isinstance(value.get("modelOutput"), dict) or "error" in value)
    )


def is_batch_result(value: Any) -> bool:
    """A line of a batch output file: OpenAI ``{custom_id, response, error}``, Anthropic ``{custom_id, result}``,
    Gemini ``{key, response | error}``."""
    if join_id(value) is None:
        return False
    if "custom_id" not in value:
        return _gemini_line(value, "response", ("candidates", "error")) or ("key" in value and "error" in value)
    response, result = value.get("response"), value.get("result")
    if isinstance(result, dict) and isinstance(result.get("type"), str):
        return True
    return ("error" in value and response is None) or (isinstance(response, dict) and "body" in response)


@dataclass(frozen=True)
class _Located:
    """Where a request line is: its file, line number and byte offset (read again by a seek, not a scan)."""

    path: Path
    lineno: int
    offset: int

    def __str__(self) -> str:
        return f"{self.path.name}:{self.lineno}"


def _head_kind(head: bytes) -> str | None:
    """``input`` / ``output`` for a batch file's first bytes (by a majority of its records), else None."""
    objects = head_objects(head)
    if not objects:
        return None
    inputs = sum(is_batch_request(o) for o in objects)
    outputs = sum(is_batch_result(o) for o in objects)
    if max(inputs, outputs) * 2 < len(objects):
        return None
    return "input" if inputs > outputs else "output"


def _folder_kinds(folder: PurePosixPath, beside: Beside) -> dict[str, list[PurePosixPath]]:
    """The batch files of ``folder`` by kind (``input`` / ``output``), each file's head looked at once."""
    kinds: dict[str, list[PurePosixPath]] = {"input": [], "output": []}
    for location in beside.listing(folder):
        kind = _head_kind(beside.head(location)) if location.name.lower().endswith(BATCH_SUFFIXES) else None
        if kind is not None:
            kinds[kind].append(location)
    return kinds


def batch_partners(location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
    """The files a batch file is read with: an input file's are the output files of its folder (which requests were
    answered), any other batch file's the input files of its folder (the requests its results answer)."""
    if not location.name.lower().endswith(BATCH_SUFFIXES):
        return []
    head = beside.head(location)
    kind = _head_kind(head)
    if kind is None and not any(is_batch_result(o) for o in head_objects(head)):
        return []  # not a batch file (a Bedrock output holds its requests itself)
    kinds = beside.remember(("batch", location.parent), lambda: _folder_kinds(location.parent, beside))
    return kinds["output" if kind == "input" else "input"]  # the folder's list itself: never this file's kind


def _build_requests(path: Path, files: InputFiles, copies: ExitStack, dest: Path) -> None:
    """The requests index of the folder of the batch file at ``path``: each input file's requests by ``custom_id``
    (where they are, not the bodies: an input file may be hundreds of MiB, read again by a seek)."""
    with closing(sqlite3.connect(dest)) as db, db:
        db.execute("CREATE TABLE requests (custom_id TEXT, file TEXT, line INTEGER, offset INTEGER)")
        for partner in batch_partners(files.location(path), files):
            local = copies.enter_context(files.kept_copy(path, partner))
            if local is None:
                continue
            rows = ((str(join_id(r)), str(local), at.lineno, at.offset) for at, r in _requests(local))
            db.executemany("INSERT INTO requests VALUES (?, ?, ?, ?)", rows)
        db.execute("CREATE INDEX by_id ON requests (custom_id)")


def _build_answered(path: Path, files: InputFiles, dest: Path) -> None:
    """The answered index of the folder of the batch input file at ``path``: the ``custom_id`` of every result line
    of its output files."""
    with closing(sqlite3.connect(dest)) as db, db:
        db.execute("CREATE TABLE answered (custom_id TEXT PRIMARY KEY)")
        for partner in batch_partners(files.location(path), files):
            with files.sibling_copy(path, partner) as local:
                if local is None:
                    continue
                ids = (
                    (str(join_id(result)),)
                    for _lineno, _raw, result in iter_json_lines(local)
                    if isinstance(result, dict) and is_batch_result(result)
                )
                db.executemany("INSERT OR IGNORE INTO answered VALUES (?)", ids)


def _open_index(index: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{index.absolute().as_uri()}?mode=ro&immutable=1", uri=True)


class _Folder:
    """The batch files beside the input at ``path``, through the storage interface (:mod:`msgtrain.ingest.core.files`:
    the disk, or the store the input came from) and the run's shared indexes; ``copies`` keeps open, while the
    reader reads, what they point into (requests are read again by line)."""

    def __init__(self, path: Path, copies: ExitStack):
        self.path, self.copies = path, copies
        self.files = input_files()
        self._requests: sqlite3.Connection | None = None
        self._answered: sqlite3.Connection | None = None

    def _index(self, name: str, build: Callable[[Path], None]) -> sqlite3.Connection:
        index = self.copies.enter_context(self.files.shared_index(self.path, name, build))
        return self.copies.enter_context(closing(_open_index(index)))

    def answered(self, custom_id: str) -> bool:
        """Whether an output file of the folder holds the result of ``custom_id``."""
        if self._answered is None:
            self._answered = self._index("batch-answered", partial(_build_answered, self.path, self.files))
        return self._answered.execute("SELECT 1 FROM answered WHERE custom_id = ?", (custom_id,)).fetchone() is not None

    def request(self, custom_id: str) -> tuple[dict[str, Any], _Located]:
        """The request line of ``custom_id`` (raises a reject's error when there is none, or several that
        differ)."""
        if self._requests is None:
            build = partial(_build_requests, self.path, self.files, self.copies)
            self._requests = self._index("batch-requests", build)
        rows = self._requests.execute(
            "SELECT file, line, offset FROM requests WHERE custom_id = ? ORDER BY rowid", (custom_id,)
        ).fetchall()
        found = [_Located(Path(file), line, offset) for file, line, offset in rows]
        if not found:
            raise ValidationError(
                f"no batch input file beside this one holds custom_id {custom_id!r}: the reply's context is not "
                "in the folder",
                code="batch_request_missing",
                hint="put the batch input file (the JSONL of requests uploaded for this batch) in the same folder "
                "as its output file",
            )
        values = [_line_value(located) for located in found]
        if any(v != values[0] for v in values[1:]):
            shown = ", ".join(str(located) for located in found)
            raise ValidationError(
                f"custom_id {custom_id!r} names different requests in several batch input files ({shown}): which "
                "one this reply answers is not in the files",
                code="ambiguous_structure",
                hint="keep each batch's input and output files in a folder of their own",
            )
        return values[0], found[0]


def _file_kind(path: Path) -> str | None:
    """``input`` / ``output`` for a batch file (by a majority of its head's records), else None."""
    return _head_kind(read_head(path))


def _requests(path: Path) -> Iterator[tuple[_Located, dict[str, Any]]]:
    """The request lines of a batch input file, with where each is (one pass, lines bounded as every reader's)."""
    offset = lineno = 0
    with open_input(path) as f:
        while raw := read_bounded_line(f):
            lineno, start, offset = lineno + 1, offset, offset + line_size(raw)
            value = _parsed(raw)
            if value is not None and is_batch_request(value):
                yield _Located(path, lineno, start), value


def _parsed(raw: bytes) -> dict[str, Any] | None:
    if isinstance(raw, LongLine) or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _line_value(located: _Located) -> dict[str, Any]:
    """The request line at ``located``, read again by a seek (an input file may hold 50,000 requests)."""
    with open_input(located.path) as f:
        f.seek(located.offset)
        value = _parsed(read_bounded_line(f))
    if value is None or not is_batch_request(value):
        raise ValidationError(f"{located} changed while it was read", code="unreadable_file")
    return value


class BatchReader:
    name = "batch"
    description = (
        "Batch API files (OpenAI Batch input/output JSONL, Anthropic Message Batches, Gemini Batch API): each result"
        " joined to its request by custom_id (Gemini: key) from the input file in the same folder; Bedrock batch"
        " .jsonl.out records"
    )
    example = "sample_logs/batch/batch_output.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["custom_id", "key", "recordId"]))
    # What partners needs to return any file (its location, its head).
    partner_marks = Marks(texts=quoted(["custom_id", "key"]))  # join_id

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        return head_mostly(head, lambda o: is_batch_request(o) or is_batch_result(o) or is_bedrock_record(o))

    def partners(self, location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
        """The batch files of its folder a batch file is joined with (:func:`batch_partners`)."""
        return batch_partners(location, beside)

    def read(self, path: Path) -> Iterator[ReadEvent]:
        with ExitStack() as copies:
            yield from self._read(path, _Folder(path, copies))

    def _read(self, path: Path, folder: _Folder) -> Iterator[ReadEvent]:
        if _file_kind(path) == "input":
            yield from self._read_input(path, folder)
            return
        groups = CallLogGroups(path, metadata={"source_format": self.name})
        by_response: dict[str, str] = {}  # Responses API ids → their node (previous_response_id chains)
        for lineno, raw, value in iter_json_lines(path):
            ref = SourceRef(str(path), f"line {lineno}")
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw))
                continue
            try:
                if is_bedrock_record(value):
                    event = _bedrock_record(value, groups, ref)
                else:
                    event = self._result(value, folder, groups, by_response, ref)
            except MsgtrainError as e:
                turns = max(message_like_count(value)[1], 1) if e.code not in ("unsupported_api", "not_a_chat") else 1
                yield ReadReject(ref, e if e.where else e.located(str(ref)), excerpt(raw), turns=turns)
                continue
            if event is not None:
                yield event
        yield from groups.events()

    def _read_input(self, path: Path, folder: _Folder) -> Iterator[ReadEvent]:
        for lineno, raw, value in iter_json_lines(path):
            ref = SourceRef(str(path), f"line {lineno}")
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw))
            elif not is_batch_request(value):
                error = ValidationError(
                    "not a batch request line ({custom_id, url, body} or {custom_id, params})",
                    where=str(ref),
                    code="bad_record",
                )
                yield ReadReject(ref, error, excerpt(raw), turns=message_like_count(value)[1])
            elif folder.answered(str(join_id(value))):
                yield ReadSkip(ref, "batch_request_answered")
            else:
                yield ReadSkip(ref, "batch_request_unanswered")

    def _result(
        self,
        value: Any,
        folder: _Folder,
        groups: CallLogGroups,
        by_response: dict[str, str],
        ref: SourceRef,
    ) -> ReadEvent | None:
        """One result line: joined to its request and added to its conversation (None), or a skip."""
        if not is_batch_result(value):
            raise ValidationError(
                "not a batch result line ({custom_id, response} or {custom_id, result})", code="bad_record"
            )
        custom_id = str(join_id(value))
        anthropic_result = value.get("result")
        if "custom_id" not in value:  # Gemini: the response body is the line's response
            body = value.get("response")
            if not isinstance(body, dict) or not body.get("candidates"):
                return ReadSkip(ref, "error_response")
        elif isinstance(anthropic_result, dict):
            if anthropic_result.get("type") in _FAILED_RESULTS:
                return ReadSkip(ref, "error_response")
            body = anthropic_result.get("message")
        else:
            response = value.get("response")
            status = response.get("status_code") if isinstance(response, dict) else None
            if not isinstance(response, dict) or (isinstance(status, int) and not 200 <= status < 300):
                return ReadSkip(ref, "error_response")
            body = response.get("body")
        if not isinstance(body, dict):
            raise ValidationError("the result holds no response body", code="bad_record")
        request_line, located = folder.request(custom_id)
        call, response_id = self._call(request_line, body, groups, by_response, located)
        if call is None:
            return ReadSkip(ref, "not_a_generation_call")
        added = groups.add(call, ref, policy=_model(request_line, body), extras={"custom_id": custom_id})
        if response_id is not None and added:
            by_response[response_id] = added[-1]
        return None

    def _call(
        self,
        request_line: dict[str, Any],
        body: dict[str, Any],
        groups: CallLogGroups,
        by_response: dict[str, str],
        located: _Located,
    ) -> tuple[Call | None, str | None]:
        """The call a request line and its response body make (None for an endpoint that generates nothing), and
        the response's id when later calls can chain on it (Responses API)."""
        if "params" in request_line and "url" not in request_line:  # Anthropic Message Batches
            return anthropic.request_call(request_line["params"], body), None
        if "custom_id" not in request_line:  # Gemini Batch API: a GenerateContentRequest
            return gemini_call(request_line["request"], body), None
        url = str(request_line.get("url", ""))
        request = request_line["body"]
        if any(word in url for word in _NOT_GENERATION):
            return None, None
        if is_text_completion(request, body):  # /v1/completions with a prompt a chat template rendered
            return text_completion_call(request, body), None
        endpoint = endpoint_of(url)
        if endpoint is None or endpoint.kind not in ("openai_chat", "openai_responses", "anthropic"):
            raise ValidationError(
                f"a batch request to {url or 'no url'} ({located}): an endpoint this reader does not read",
                code="unsupported_api",
                hint="read: /v1/chat/completions, /v1/responses and Anthropic Messages batches",
            )
        if endpoint.kind == "openai_chat":
            return openai_chat_call(request, body), None
        if endpoint.kind == "anthropic":
            return anthropic.request_call(request, body), None
        call = openai_responses.responses_call(request, body, groups.history, by_response)
        response_id = body.get("id")
        return call, response_id if isinstance(response_id, str) else None


def _bedrock_record(value: dict[str, Any], groups: CallLogGroups, ref: SourceRef) -> ReadEvent | None:
    """One Bedrock batch output line: its InvokeModel body and answer as a call (None), or a skip when the record
    failed (``error``) and generated nothing."""
    output = value.get("modelOutput")
    if not isinstance(output, dict):
        return ReadSkip(ref, "error_response")
    groups.add(invoke_call(value["modelInput"], output, None), ref, extras={"record_id": str(value["recordId"])})
    return None


def _model(request_line: dict[str, Any], body: dict[str, Any]) -> str | None:
    """The model that answered: the response's own name for it, else the request's."""
    request = request_line.get("body", request_line.get("params"))
    for value in (
        body.get("model"),
        body.get("modelVersion"),
        request.get("model") if isinstance(request, dict) else None,
    ):
        if isinstance(value, str) and value:
            return value
    return None


READER = BatchReader()
