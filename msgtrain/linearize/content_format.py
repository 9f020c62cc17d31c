"""How a chat template reads a message's ``content``: as one string, or as a list of typed parts.

A serving engine decides this per template before rendering (vLLM's ``--chat-template-content-format auto``), and
the prompt the policy saw was rendered from content in that shape, so msgtrain renders training data the same way:

- ``openai``: the template iterates a message's content (``{% for part in message['content'] %}``, also through a
  filter, a test or a slice, and through variables assigned from ``messages`` or from a message); content is
  handed to it as the log holds it (a string, or a list of parts).
- ``string``: any other template (one that concatenates ``message.content``); list content is handed to it as
  one string, its text parts joined with ``"\\n"`` (as vLLM joins them). Parts a string cannot express (an
  image, audio, video) are left out: the sample is flagged ``media_not_rendered`` (msgtrain.linearize.plan), as
  for any template that never renders a modality.

A template the parser cannot read is ``string`` (vLLM's default for text templates). The choice is by the template
text alone, so it is made once per template (cached) and is the same in every process.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator
from typing import Any, Literal

ContentFormat = Literal["string", "openai"]
CONTENT_FORMATS = ("auto", "string", "openai")


def _loads(node: Any, name: str) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name


def _reads_key(node: Any, name: str, key: str) -> bool:
    """``name[key]`` or ``name.key``."""
    from jinja2 import nodes

    if isinstance(node, nodes.Getitem):
        return _loads(node.node, name) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return _loads(node.node, name) and node.attr == key
    return False


def _reads(node: Any, name: str, key: str | None = None) -> bool:
    """``name`` (or ``name[key]``), possibly through a filter, a test or a slice: ``messages[1:]``,
    ``message.content | list``."""
    from jinja2 import nodes

    if isinstance(node, nodes.Filter | nodes.Test):
        return node.node is not None and _reads(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _reads(node.node, name, key)
    return _reads_key(node, name, key) if key else _loads(node, name)


def _aliases(root: Any, name: str) -> Iterator[str]:
    """``name`` and every variable assigned from it (or from one of those), transitively."""
    from jinja2 import nodes

    yield name
    seen = {name}
    todo = deque([name])
    while todo:
        current = todo.popleft()
        for assign in root.find_all(nodes.Assign):
            target = assign.target
            if isinstance(target, nodes.Name) and target.name not in seen and _reads(assign.node, current):
                seen.add(target.name)
                todo.append(target.name)
                yield target.name


def _loop_targets(root: Any, iterated: list[str], key: str | None = None) -> Iterator[str]:
    """The names bound by ``{% for x in v %}`` (or ``v[key]``) loops over any of ``iterated``."""
    from jinja2 import nodes

    for loop in root.find_all(nodes.For):
        if isinstance(loop.target, nodes.Name) and any(_reads(loop.iter, v, key) for v in iterated):
            yield loop.target.name


@functools.lru_cache(maxsize=32)
def detect_content_format(template: str) -> ContentFormat:
    """``openai`` when ``template`` loops over a message's content, else ``string`` (the module docstring)."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        # The extensions transformers compiles templates with: ``{% generation %}`` blocks must parse.
        from msgtrain.linearize.template import compile_chat_template

        try:
            env: Any = compile_chat_template("").environment
        except ImportError:
            env = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"])
        root = env.parse(template)
    except Exception:  # a template jinja cannot parse: rendering reports it; here, the default
        return "string"
    messages = list(_aliases(root, "messages"))
    message_names = list(_loop_targets(root, messages))
    return "openai" if any(True for _ in _loop_targets(root, message_names, "content")) else "string"


def resolve_content_format(given: str, template: str | None) -> ContentFormat:
    """``given`` unless it is ``auto``, else the format detected from ``template`` (no template: ``string``)."""
    if given == "string":
        return "string"
    if given == "openai":
        return "openai"
    return detect_content_format(template) if template else "string"


def joined_text(content: list[Any]) -> str:
    """List content as a string template receives it: its text parts joined with ``"\\n"`` (other parts left out)."""
    return "\n".join(
        str(p.get("text", ""))
        for p in content
        if isinstance(p, dict) and p.get("type") == "text" and p.get("text") is not None
    )
