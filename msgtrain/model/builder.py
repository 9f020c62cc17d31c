"""MessageBuilder and OptionResultBuilder (seed 003).

Invariants:
- A builder produces one message: a ``parts`` message, or an ``option_call`` message when calls were added
  (its text/media parts become the preamble the policy emitted before calling).
- ``step_num`` is kept by ``continue_step`` and advanced by ``next_step``.
- Every ``add_option_call`` gets a unique invocation id; ``OptionResultBuilder`` copies id, option name and step
  from the call it answers and refuses a mismatched id or name.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    AnyMessage,
    MediaPart,
    Modality,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    Role,
    TextPart,
)

_counter = itertools.count()


def new_invocation_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}_{next(_counter)}"


class MessageBuilder:
    def __init__(self, *, step_num: int | None = None, policy: str = DEFAULT_POLICY, role: Role | None = None):
        self.step_num = step_num
        self.policy = policy
        # Predictable default: a policy's own output is an assistant message, the runtime's a tool message.
        self.role: Role = role or ("tool" if policy == RUNTIME_POLICY else "assistant")
        self._parts: list[Part] = []
        self._calls: list[OptionCallPayload] = []
        self._media = 0

    @staticmethod
    def _step_of(last: AnyMessage | int | None) -> int | None:
        if last is None:
            return None
        return last if isinstance(last, int) else last.step_num

    @classmethod
    def next_step(cls, last: AnyMessage | int | None = None, **kw: Any) -> MessageBuilder:
        step = cls._step_of(last)
        return cls(step_num=0 if step is None else step + 1, **kw)

    @classmethod
    def continue_step(cls, last: AnyMessage | int | None = None, **kw: Any) -> MessageBuilder:
        step = cls._step_of(last)
        return cls(step_num=0 if step is None else step, **kw)

    def add_text(self, text: str) -> MessageBuilder:
        self._parts.append(TextPart(text=text))
        return self

    def add_reasoning(self, text: str) -> MessageBuilder:
        self._parts.append(ReasoningPart(text=text))
        return self

    def add_media(
        self, modality: Modality, url: str, prompt_hint: str | None = None, mime: str | None = None
    ) -> MessageBuilder:
        self._media += 1
        self._parts.append(
            MediaPart(modality=modality, url=url, prompt_hint=prompt_hint, mime=mime, id=f"media_{self._media}")
        )
        return self

    def add_image(self, prompt_hint: str | None, url: str, mime: str | None = None) -> MessageBuilder:
        return self.add_media("image", url, prompt_hint, mime)

    def add_audio(self, prompt_hint: str | None, url: str, mime: str | None = None) -> MessageBuilder:
        return self.add_media("audio", url, prompt_hint, mime)

    def add_video(self, prompt_hint: str | None, url: str, mime: str | None = None) -> MessageBuilder:
        return self.add_media("video", url, prompt_hint, mime)

    def add_document(self, prompt_hint: str | None, url: str, mime: str | None = None) -> MessageBuilder:
        return self.add_media("document", url, prompt_hint, mime)

    def add_option_call(self, option_name: str, arguments: dict[str, Any] | None = None) -> OptionCallPayload:
        call = OptionCallPayload(invocation_id=new_invocation_id(), option_name=option_name, arguments=arguments or {})
        self._calls.append(call)
        return call

    @property
    def last_option_call(self) -> OptionCallMessage:
        """The most recent call as a stand-alone message (what an executor answers)."""
        if not self._calls:
            raise ValidationError("no option call has been added to this builder", code="no_call")
        return OptionCallMessage(
            calls=(self._calls[-1],),
            policy=self.policy,
            role_hint_for_llm="assistant",
            step_num=self.step_num,
        )

    def to_message(self) -> AnyMessage:
        if self._calls:
            return OptionCallMessage(
                parts=tuple(self._parts),
                calls=tuple(self._calls),
                policy=self.policy,
                role_hint_for_llm="assistant",
                step_num=self.step_num,
            )
        return PartsMessage(
            parts=tuple(self._parts), policy=self.policy, role_hint_for_llm=self.role, step_num=self.step_num
        )


class OptionResultBuilder:
    """Builds the result of one call; ids, names and step are copied from the call."""

    def __init__(self, call: OptionCallPayload, step_num: int | None, policy: str):
        self.call = call
        self.step_num = step_num
        self.policy = policy

    @classmethod
    def response_to(
        cls,
        call: OptionCallMessage | OptionCallPayload,
        *,
        invocation_id: str | None = None,
        option_name: str | None = None,
        policy: str | None = None,
    ) -> OptionResultBuilder:
        if isinstance(call, OptionCallMessage):
            chosen = [c for c in call.calls if invocation_id is None or c.invocation_id == invocation_id]
            if invocation_id is None and len(call.calls) > 1:
                raise ValidationError(
                    f"message has {len(call.calls)} calls; say which one",
                    hint="pass invocation_id=",
                    code="ambiguous_call",
                )
            step = call.step_num
        else:
            chosen = [call] if invocation_id in (None, call.invocation_id) else []
            step = None
        if not chosen:
            raise ValidationError(
                f"invocation id {invocation_id!r} does not match the call",
                code="mismatched_id",
                hint="a result must answer the call it was built from",
            )
        payload = chosen[0]
        if option_name is not None and option_name != payload.option_name:
            raise ValidationError(
                f"option name {option_name!r} does not match the call's {payload.option_name!r}",
                code="mismatched_name",
            )
        return cls(payload, step, policy or payload.option_name)

    def _message(self, payload: OptionResultPayload, subgraph: Any = None) -> OptionResultMessage:
        data = subgraph.to_data() if subgraph is not None and hasattr(subgraph, "to_data") else subgraph
        return OptionResultMessage(
            result=payload,
            policy=self.policy,
            role_hint_for_llm="tool",
            step_num=self.step_num,
            subgraph=data,
        )

    def success(self, result: Any, *, subgraph: Any = None) -> OptionResultMessage:
        """The option ran. ``subgraph`` may hold the sub-agent conversation that produced the result."""
        return self._message(
            OptionResultPayload(
                invocation_id=self.call.invocation_id, option_name=self.call.option_name, result=result
            ),
            subgraph,
        )

    def error(self, error_type: str, error_message: str, retryable: bool = False) -> OptionResultMessage:
        payload = OptionResultPayload(
            invocation_id=self.call.invocation_id,
            option_name=self.call.option_name,
            is_error=True,
            error_type=error_type,
            error_message=error_message,
            retryable=retryable,
        )
        return OptionResultMessage(
            result=payload, policy=RUNTIME_POLICY, role_hint_for_llm="tool", step_num=self.step_num
        )
