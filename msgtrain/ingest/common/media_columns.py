"""LLaMA-Factory media columns: ``images`` / ``videos`` / ``audios`` paths beside a conversation, placed where the
text says ``<image>`` / ``<video>`` / ``<audio>``.

Any reader of a record that may carry these columns (ShareGPT, OpenAI-shaped ``messages``, the structural reader)
reads them here, so a multimodal record is never trained as text that merely mentions ``<image>`` while its image
is dropped.

Invariants:
- Paths are references (:class:`~msgtrain.model.message.MediaPart`), never opened or followed.
- Placeholders take the column's entries in order; a placeholder with no entry left, or an entry no placeholder
  took, rejects the record (``media_mismatch``), as LLaMA-Factory refuses it. A placeholder of a modality whose
  column the record lacks is literal text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import Step, as_text
from msgtrain.model.message import MediaPart, Modality, Part, TextPart

MEDIA_COLUMNS: dict[str, Modality] = {"images": "image", "videos": "video", "audios": "audio"}
_PLACEHOLDER = re.compile(r"<(image|video|audio)>")


class MediaColumns:
    """The record's media columns, consumed in placeholder order."""

    def __init__(self, container: dict[str, Any]):
        self.queues: dict[Modality, list[str]] = {}
        for column, modality in MEDIA_COLUMNS.items():
            value = container.get(column)
            if value is None:
                continue
            items = value if isinstance(value, list) else [value]
            self.queues[modality] = [as_text(v) for v in items]

    def split(self, text: str, where: str) -> list[Part]:
        if not self.queues or "<" not in text:
            return [TextPart(text=text)] if text else []
        parts: list[Part] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            modality = MEDIA_COLUMNS[m.group(1) + "s"]
            queue = self.queues.get(modality)
            if queue is None:
                continue  # no such column: the text is literal
            if not queue:
                raise ValidationError(
                    f"more <{modality}> placeholders than entries in the {modality}s column",
                    where=where,
                    code="media_mismatch",
                    hint="each placeholder needs one path in the record's media column",
                )
            if m.start() > pos:
                parts.append(TextPart(text=text[pos : m.start()]))
            parts.append(MediaPart(modality=modality, url=queue.pop(0)))
            pos = m.end()
        if pos < len(text):
            parts.append(TextPart(text=text[pos:]))
        return parts

    def check_consumed(self) -> None:
        left = {m: len(q) for m, q in self.queues.items() if q}
        if left:
            raise ValidationError(
                f"media entries without a placeholder: {left}",
                where="record",
                code="media_mismatch",
                hint="put one <image>/<video>/<audio> placeholder in the text per media path",
            )

    def place(self, steps: list[Step]) -> list[Step]:
        """Steps whose text placeholders became the media they stand for (all entries used, else a reject)."""
        if not any(self.queues.values()):
            return steps
        out: list[Step] = []
        for step in steps:
            parts = getattr(step.message, "parts", None)
            if parts and any(isinstance(p, TextPart) for p in parts):
                where = f"message[{step.index}]" if step.index is not None else "record"
                placed: list[Part] = []
                for part in parts:
                    placed.extend(self.split(part.text, where) if isinstance(part, TextPart) else [part])
                step = dataclasses.replace(step, message=step.message.model_copy(update={"parts": tuple(placed)}))
            out.append(step)
        self.check_consumed()
        return out


_MEDIA_URL = re.compile(r"^data:(?:audio|image|video)/")
_MAX_LOOKED = 4096  # values of a request looked at for media beside its messages


def media_beside(request: dict[str, Any], messages_key: str) -> str | None:
    """The path (relative to ``request``) of media a logged request carries outside its messages (a ``data:`` URL:
    NeMo Gym's ASR server keeps the audio it sends in ``metadata.audio_url``), or None. The model was sent it, and
    where it stood among the messages the log does not say: such a request cannot be trained exactly."""
    stack: list[tuple[str, Any]] = [(k, v) for k, v in request.items() if k != messages_key]
    looked = 0
    while stack and looked < _MAX_LOOKED:
        where, value = stack.pop()
        looked += 1
        if isinstance(value, str) and _MEDIA_URL.match(value):
            return where
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
    return None


def media_beside_error(where: str) -> ValidationError:
    return ValidationError(
        f"the request holds media at {where} beside its messages: the model was sent it, and where it stood among "
        "the messages is not in the log",
        code="unsupported_content",
        hint="log the media inside the message it was sent with (an input_audio / image part)",
    )
