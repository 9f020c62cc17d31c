"""Text-completion calls (``/v1/completions``: vLLM, SGLang and OpenAI-compatible servers): a prompt text and the
texts generated after it.

A chat served through the completions endpoint sends the prompt its chat template rendered; read as one user
message it would be rendered twice. The prompt is parsed back into its messages
(:mod:`msgtrain.ingest.common.rendered_prompts`), and each choice is a reply sampled after exactly that prompt.

Invariants:
- Only a prompt whose markup parses unambiguously is read; any other text (a base model's raw prompt, markup with
  a prefill) is a ``not_a_chat`` / ``prerendered_prompt`` error: the caller rejects the record, counting its choices.
- The logged text is the exact prompt: it rides on each reply (``rendered_prompt``) for the linearizer, which
  prefers it to a re-rendering that differs; logged ids (vLLM's ``prompt_token_ids`` / ``token_ids``) are used as
  logged, as for chat calls. The stop token an engine left at the end of a reply's text is the template's to write.
- The usage the server reported rides on each reply (the usage check).
"""

from __future__ import annotations

from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.call_log import Call
from msgtrain.ingest.common.content_parts import rendered_template_text
from msgtrain.ingest.common.conversation_files import Step
from msgtrain.ingest.common.rendered_prompts import RENDERED_PROMPT_KEY, parse_rendered_prompt
from msgtrain.model.graph import Env
from msgtrain.model.openai import from_openai_message, generation_from_choice


def is_text_completion(request: Any, response: Any) -> bool:
    """A ``/v1/completions`` request (a ``prompt`` text, no messages) and its response (choices with ``text``)."""
    if not isinstance(request, dict) or not isinstance(response, dict) or "messages" in request:
        return False
    choices = response.get("choices")
    return (
        isinstance(request.get("prompt"), str)
        and isinstance(choices, list)
        and bool(choices)
        and all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices)
    )


def text_completion_call(request: dict[str, Any], response: dict[str, Any]) -> Call:
    """The call of a text completion whose prompt a chat template rendered (module docstring)."""
    prompt = request["prompt"]
    rendered = parse_rendered_prompt(prompt)
    if rendered is None:
        marker = rendered_template_text(prompt)
        raise ValidationError(
            f"the completion prompt is chat-template markup no family reads unambiguously ({marker!r})"
            if marker is not None
            else "the completion prompt is raw text (a base model's prompt), not a chat",
            where="request.prompt",
            code="prerendered_prompt" if marker is not None else "not_a_chat",
            hint="msgtrain trains chats: log the messages (chat completions) or a prompt rendered by a chat template",
        )
    context = [Step(from_openai_message(m), index=i) for i, m in enumerate(rendered.messages)]
    metadata: dict[str, Any] = {RENDERED_PROMPT_KEY: rendered.metadata()}
    if isinstance(response.get("usage"), dict):  # the prompt size the server counted, for the usage check
        metadata["usage"] = response["usage"]
    samples = []
    for choice in sorted(response["choices"], key=lambda c: c.get("index", 0)):
        reply = from_openai_message(
            {"role": "assistant", "content": rendered.reply_text(choice["text"])}, index=len(context)
        )
        reply = reply.model_copy(update={"metadata": {**reply.metadata, **metadata}})
        # vLLM returns the prompt ids on each choice of a completion (return_token_ids)
        body = (
            response
            if "prompt_token_ids" in response
            else {**response, "prompt_token_ids": choice.get("prompt_token_ids")}
        )
        samples.append(Step(reply, generation=generation_from_choice(choice, body)))
    return Call(context, samples, Env.make([], None))
