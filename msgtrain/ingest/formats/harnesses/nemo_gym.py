"""NVIDIA NeMo Gym rollouts: the ``example_rollouts.jsonl`` / ``ng_collect_rollouts`` output, one rollout per line:
``{responses_create_params, response, reward, <the task's own fields>, _ng_task_index, _ng_rollout_index,
agent_ref}``.

What is read:
- Each line is one record and one graph (a trajectory): ``responses_create_params`` is the Responses API request the
  agent started from (``instructions``, ``input`` as a string or items, ``tools``), ``response.output`` the items the
  agent loop produced (reasoning, assistant messages, function calls, their outputs), read as the OpenAI Responses
  reader reads items (:mod:`msgtrain.ingest.formats.api.openai_responses`). Each run of assistant-side items of the
  output is one sampled turn, in everything before it; assistant items of the request's input are context.
- Engine token ids: with ``return_token_id_information`` NeMo Gym's vLLM model server puts one bundle per model call
  on an output item of the call (``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``; see
  ``nemo_gym/openai_utils.py`` ``TokenIDLogProbMixin`` and ``nemo_gym/responses_converter.py``). It becomes the turn's
  :class:`~msgtrain.model.message.Generation` (ids, logprobs, prompt ids), so the turn is trained on the engine's
  ids, checked against the text (:mod:`msgtrain.linearize.engine_ids`). Empty bundles (ids stripped before the file
  was published) are no ids.
- ``reward`` is the sample's reward; the record's other scalar fields (``problem_id``, ``_ng_task_index``, ...) and
  the agent's name are extras, so GRPO groups can be rebuilt from the rows (``--group-by _ng_task_index``).

Safe readings:
- A run of assistant items holding two calls' bundles is rejected (``ambiguous_token_ids``): which items each call
  produced is not in the file, and a wrong split would train ids on the wrong text.
- A reply right after calls whose ``function_call_output`` the rollout did not keep (an agent that logs its calls
  alone) and every reply after it are context, not trained (``context_unknown``); a rollout of replies and results
  with no prompt at all is rejected (``no_prompt``), its replies counted as lost. An output item that cannot be
  read (a ``function_call_output`` answering no call: Harbor's terminal agent logs a turn without a command so) is a
  gap the same way: the replies before it trained, the ones after it context, the gap a line of the books.
- A reasoning item's ``summary`` is kept as the Responses reader keeps it (redacted reasoning, never trained as
  text); where the engine's ids are logged they hold the reasoning the policy sampled.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import Step, base_graph_id, build_linear_graph, iter_raw_records
from msgtrain.ingest.common.media_columns import media_beside, media_beside_error
from msgtrain.ingest.common.tool_schemas import openai_tools
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
    head_shape,
    quoted,
)
from msgtrain.ingest.formats.api.openai_responses import RESULT_ITEMS, ResponsesConverter
from msgtrain.model.graph import Origin
from msgtrain.model.message import Generation, OptionCallMessage

POLICY = "nemo-gym-policy"
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
_SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens")
# Fields of a rollout that are not scalars of the task (the conversation, or bookkeeping of the agent).
_NOT_EXTRAS = frozenset({"responses_create_params", "response", "reward", "agent_ref"})


class NemoGymReader:
    name = "nemo_gym"
    description = (
        "NVIDIA NeMo Gym rollouts (responses_create_params, response, reward; engine token ids per model call)"
    )
    example = "sample_logs/nemo_gym/example_rollouts.jsonl"
    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["responses_create_params"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        if any(_is_rollout(o) for o in head_objects(head)):
            return True
        # a rollout line longer than the head (a long trajectory): its keys, from the tolerant probe
        return head_shape(head).has(".responses_create_params", ".response.output")

    def read(self, path: Path) -> Iterator[ReadItem]:
        for rec in iter_raw_records(path):
            if isinstance(rec.value, Exception):
                yield ReadReject(rec.ref, rec.value, excerpt(rec.raw or b""))  # type: ignore[arg-type]
                continue
            if rec.ref.record == "file" and isinstance(rec.value, list):  # a JSON array of rollouts
                for i, value in enumerate(rec.value):
                    ref = SourceRef(str(path), f"item {i}")
                    yield RecordTask(ref, partial(_rollout_events, path, ref, value), raw=value)
                continue
            yield RecordTask(rec.ref, partial(_rollout_events, path, rec.ref, rec.value), raw=rec.raw or rec.value)


def _is_rollout(o: Any) -> bool:
    return (
        isinstance(o, dict)
        and isinstance(o.get("responses_create_params"), dict)
        and isinstance(o.get("response"), dict)
    )


def _assistant_side(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    return item.get("role") == "assistant" if kind == "message" else kind not in RESULT_ITEMS


def _bundles(output: list[Any], start: int, where: str) -> dict[str, list[Any]] | None:
    """The token bundle of the assistant run starting at ``output[start]`` (None when it has no ids)."""
    found: list[tuple[int, dict[str, list[Any]]]] = []
    i = start
    called = False
    while i < len(output) and _assistant_side(output[i]):
        item = output[i]
        kind = item.get("type", "message")
        if called and kind == "message":
            break  # the next model call (see ResponsesConverter.steps)
        called = called or kind not in ("message", "reasoning")
        if item.get("generation_token_ids"):
            missing = [k for k in TOKEN_FIELDS if not isinstance(item.get(k), list)]
            if missing:
                raise ValidationError(
                    f"token ids without {missing}",
                    where=f"{where}[{i}]",
                    code="bad_token_ids",
                    hint="a NeMo Gym token bundle holds prompt_token_ids, generation_token_ids, generation_log_probs",
                )
            found.append((i, {k: item[k] for k in TOKEN_FIELDS}))
        i += 1
    if len(found) > 1:
        raise ValidationError(
            f"the assistant items {start}..{i - 1} hold the token ids of {len(found)} model calls",
            where=where,
            code="ambiguous_token_ids",
            hint="which items each call produced is not in the record; log one model call per run of assistant items",
        )
    return found[0][1] if found else None


def _rollout_events(path: Path, ref: SourceRef, rec: Any) -> list[ReadEvent]:
    if not _is_rollout(rec):
        raise ValidationError(
            "not a NeMo Gym rollout: it needs 'responses_create_params' and 'response' objects",
            where=str(ref),
            code="bad_record",
            hint="each line of a rollouts file is one rollout as ng_collect_rollouts writes it",
        )
    request, response = rec["responses_create_params"], rec["response"]
    media = media_beside(request, "input")
    if media is not None:
        raise media_beside_error(f"{ref} responses_create_params.{media}")
    output = response.get("output")
    if not isinstance(output, list) or not output:
        return [ReadSkip(ref, "rollout whose response has no output")]
    converter = ResponsesConverter(policy=POLICY)
    context = [Step(s.message, origin=Origin.CONTEXT, index=s.index) for s in converter.request_context(request)]
    sampling = {k: request[k] for k in _SAMPLING_KEYS if request.get(k) is not None}
    model = response.get("model") if isinstance(response.get("model"), str) else None
    steps = list(context)
    gap: str | None = None
    converted = converter.steps(output, where="response.output", cut=True)
    unreadable = converter.gap
    for s in converted:
        if s.message.role != "assistant":
            steps.append(Step(s.message, origin=Origin.CONTEXT, index=len(context) + (s.index or 0)))
            continue
        if gap is None and unreadable is not None and (s.index or 0) > unreadable[0]:
            gap = f"response.output[{unreadable[0]}]"  # after an item that cannot be read (a result of no call)
        if gap is None and steps and isinstance(steps[-1].message, OptionCallMessage):
            gap = f"response.output[{s.index}]"  # right after calls whose results the rollout did not keep
        if gap is not None:
            why = f"after {gap}, which the rollout does not hold whole: the context it was sampled in is unknown"
            carried = s.message.model_copy(update={"metadata": {**s.message.metadata, "why_not_trained": why}})
            steps.append(Step(carried, origin=Origin.CARRIED, index=len(context) + (s.index or 0)))
            continue
        bundle = _bundles(output, s.index or 0, f"{ref} response.output")
        generation = Generation(
            model=model,
            sampling=sampling,
            token_ids=tuple(int(t) for t in bundle["generation_token_ids"]) if bundle else None,
            logprobs=tuple(float(x) for x in bundle["generation_log_probs"]) if bundle else None,
            prompt_token_ids=tuple(int(t) for t in bundle["prompt_token_ids"]) if bundle else None,
        )
        steps.append(Step(s.message, origin=Origin.SAMPLED, generation=generation, index=len(context) + (s.index or 0)))
    if unreadable is not None and not any(s.origin is Origin.SAMPLED for s in steps):
        raise unreadable[1].located(str(ref))  # nothing trainable before it
    if not any(s.origin is Origin.SAMPLED for s in steps):
        return [ReadSkip(ref, "rollout whose output holds no assistant item")]
    if not any(s.message.role not in ("assistant", "tool") for s in steps):
        raise ValidationError(
            "the rollout logs replies and tool results, no prompt: the system prompt and task its agent sent first "
            "are not in the record",
            where=f"{ref} response.output",
            code="no_prompt",
            hint="log the agent's first request in responses_create_params.input (or its transcript in the output)",
        )
    tools = openai_tools(
        request.get("tools") or response.get("tools") or [], where=f"{ref} responses_create_params.tools"
    )
    graph = build_linear_graph(steps, base_id=base_graph_id(path, ref), tools=tools, policy=POLICY)
    events: list[ReadEvent] = [ReadGraph(graph, ref, records=1, extras=_extras(rec))]
    if unreadable is not None:  # the books' line for the gap: no record of its own, no turn lost with it
        kept = sum(s.origin is Origin.CARRIED for s in steps)
        error = unreadable[1].located(str(ref))
        note = f"; the rollout is trained up to it, {kept} later replies kept as context only"
        events.append(
            ReadReject(
                ref, type(error)(error.message + note, where=error.where, hint=error.hint, code=error.code), "", count=0
            )
        )
    return events


def _extras(rec: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {
        k: v for k, v in rec.items() if k not in _NOT_EXTRAS and (v is None or isinstance(v, str | int | float | bool))
    }
    reward = rec.get("reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        extras["reward"] = float(reward)
    agent = rec.get("agent_ref")
    if isinstance(agent, dict) and isinstance(agent.get("name"), str):
        extras["agent"] = agent["name"]
    return extras


READER = NemoGymReader()
