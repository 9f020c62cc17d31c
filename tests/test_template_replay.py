"""Replayed rendering (msgtrain.linearize.template) against full renderings by transformers' own compiled template.

A traced rendering may take the output of its loop's first iterations from an earlier rendering of a list that
shares those messages. These tests render chains of growing, branching and edited message lists through templates
built to defeat that (look-ahead, ``loop.last``, ``loop.length``, namespace state, passes over the whole list,
``loop.changed``, ``cycler``, macros, captured output, negative indices) and compare every text with a full
rendering by transformers' ``_compile_jinja_template`` (not msgtrain's environment). They also check that replay
happens where it is sound, so a change that silently renders everything in full fails too.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgtrain.linearize.template import RenderTrace, compile_chat_template, compile_traced_template, render_traced

transformers_templates = pytest.importorskip("transformers.utils.chat_template_utils")

HEAD = "{%- if tools %}[tools:{{ tools | length }}]{% endif %}{%- set ns = namespace(n=0, last='') %}"
GEN = "{%- if add_generation_prompt %}<gen>{% endif %}"
TEMPLATES: dict[str, str] = {
    # replayable: look-behind, look-ahead and loop.last (as Qwen2.5 does for runs of tool messages)
    "lookaround": HEAD + "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<tools>{% endif %}"
    "{{ m.content }}{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}</tools>{% endif %}"
    "{%- else %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endif %}"
    "{%- endfor %}" + GEN,
    # replayable: namespace state carried across iterations, and a macro reading it
    "namespace": "{%- macro tag(x) %}[{{ ns.n }}:{{ x }}]{% endmacro %}"
    + HEAD
    + "{%- for m in messages %}{% set ns.n = ns.n + 1 %}{% if m.role != ns.last %}{{ tag(m.role) }}{% endif %}"
    "{% set ns.last = m.role %}{{ m.content }}{% endfor %}[end {{ ns.n }}]" + GEN,
    # replayable within a run of the same last user index: a pass over the whole list before the loop (Qwen3)
    "last_user": HEAD + "{%- set ns2 = namespace(q=messages|length - 1) %}"
    "{%- for m in messages[::-1] %}{% if m.role == 'user' and ns2.q == messages|length - 1 %}"
    "{% set ns2.q = messages|length - 1 - loop.index0 %}{% endif %}{% endfor %}"
    "{%- for m in messages %}{{ m.role }}:{% if loop.index0 >= ns2.q %}{{ m.content }}{% else %}~{% endif %};"
    "{% endfor %}" + GEN,
    # never replayable past where they look at the length or the end
    "length": HEAD + "{%- for m in messages %}{{ loop.revindex }}/{{ loop.length }}{{ m.content }}{% endfor %}" + GEN,
    "negative": HEAD + "{%- for m in messages %}{{ m.content }}{% if m.role == messages[-1].role %}*{% endif %}"
    "{% endfor %}" + GEN,
    "changed": HEAD + "{%- for m in messages %}{% if loop.changed(m.role) %}|{{ m.role }}|{% endif %}{{ m.content }}"
    "{% endfor %}" + GEN,
    "cycler": HEAD + "{%- set c = cycler('a', 'b', 'c') %}{%- for m in messages %}{% if m.role == 'user' %}"
    "{{ c.next() }}{% endif %}{{ m.content }}{% endfor %}" + GEN,
    "nextitem": HEAD + "{%- for m in messages %}{{ m.content }}{% if loop.nextitem is defined %}"
    "({{ loop.nextitem.role }}){% endif %}{% if loop.previtem is defined %}<{{ loop.previtem.role }}{% endif %}"
    "{% endfor %}" + GEN,
    "no_loop_var": HEAD + "{%- for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" + GEN,
    "filtered": HEAD + "{%- for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.content }}"
    "{% endfor %}" + GEN,
    "nested": HEAD + "{%- for m in messages %}{{ m.content }}{% if m.role == 'user' %}{% for o in messages %}"
    "{{ o.role[0] }}{% endfor %}{% endif %}{% endfor %}" + GEN,
    "in_macro": "{%- macro body(ms) %}{% for m in ms %}{{ m.content }}.{% endfor %}{% endmacro %}"
    + HEAD
    + "{{ body(messages) }}"
    + GEN,
    "captured": HEAD + "{%- set out %}{% for m in messages %}{{ m.content }}{% endfor %}{% endset %}"
    "{{ out | upper }}" + GEN,
    # a namespace held by a namespace: restoring the outer one would hand over the earlier rendering's inner one
    "nested_namespace": HEAD + "{%- set outer = namespace(box=none) %}{%- for m in messages %}"
    "{% if outer.box is none and m.role == 'user' %}{% set outer.box = namespace(c=0) %}{% endif %}"
    "{% if outer.box is not none %}{% set b = outer.box %}{% set b.c = b.c + 1 %}{{ b.c }}{% endif %}"
    "{{ m.content }}{% endfor %}" + GEN,
    "dumps_messages": HEAD + "{%- for m in messages %}{{ m.content }}{% endfor %}{{ messages | tojson }}" + GEN,
    "whole_list_filters": HEAD + "{%- for m in messages %}{{ m.content }}{% if messages|selectattr('role', "
    "'equalto', 'user')|list|length > 2 %}!{% endif %}{% endfor %}" + GEN,
    # a top-level variable a loop filter reads: a cell of the compiled root, not one of its plain locals
    "cell_variable": HEAD + "{%- set last_idx = messages|length - 1 %}{%- for m in messages %}{% set i = loop.index0 %}"
    "<{{ m.role }}>{% for c in [m.content] if i == last_idx %}[LAST]{% endfor %}{{ m.content }}{% endfor %}" + GEN,
    # a variable of a ``with`` around the main loop (an ``l_1_*`` local): compared before a replay like the others
    "with_scope": HEAD + "{%- with last = messages|length - 1 %}{%- for m in messages %}<{{ m.role }}>"
    "{% if loop.index0 == last %}[LAST]{% endif %}{{ m.content }}{% endfor %}{%- endwith %}" + GEN,
}
REPLAYABLE = {"lookaround", "namespace", "last_user", "no_loop_var", "nextitem"}
ROLES = ("system", "user", "assistant", "tool")


def _ids(messages: list[dict[str, Any]]) -> list[str]:
    """Content-addressed like graph nodes: an id names the message and everything before it."""
    out, prev = [], ""
    for m in messages:
        prev = hashlib.blake2b(f"{prev}|{m['role']}|{m['content']}".encode(), digest_size=8).hexdigest()
        out.append(prev)
    return out


def _chain(draw: Any) -> list[list[dict[str, Any]]]:
    base = draw(
        st.lists(
            st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(ROLES), st.text("abxy", max_size=3)),
            min_size=1,
            max_size=14,
        )
    )
    lists = []
    for _ in range(draw(st.integers(2, 8))):
        k = draw(st.integers(1, len(base)))
        cur = [dict(m) for m in base[:k]]
        if draw(st.booleans()) and k > 1:  # an edit (a branch): another message at some index
            i = draw(st.integers(0, k - 1))
            cur[i] = {"role": cur[i]["role"], "content": cur[i]["content"] + "E"}
        lists.append(cur)
    return lists


def _render_chain(name: str, lists: list[list[dict[str, Any]]], gen: bool, tools: list[Any] | None) -> int:
    source = TEMPLATES[name]
    reference = transformers_templates._compile_jinja_template(source)
    traced = compile_traced_template(source)
    if traced is None:
        assert name == "captured"
        return 0
    variables = {"tools": tools, "documents": None, "add_generation_prompt": gen}
    ref: RenderTrace | None = None
    replayed = 0
    for msgs in lists:
        text, ref = render_traced(traced, msgs, _ids(msgs), ref, variables)
        assert text == reference.render(messages=msgs, **variables), (name, msgs)
        assert text == compile_chat_template(source).render(messages=msgs, **variables)
        replayed += ref.replayed
    return replayed


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_replayed_renderings_equal_full_renderings(name: str, data: Any) -> None:
    lists = data.draw(st.composite(lambda draw: _chain(draw))())
    _render_chain(name, lists, data.draw(st.booleans()), data.draw(st.sampled_from([None, [{"name": "f"}]])))


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_replay_happens_exactly_where_it_is_sound(name: str) -> None:
    roles = ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "user", "assistant"]
    full = [{"role": r, "content": f"m{i}"} for i, r in enumerate(roles)]
    growing = [full[:k] for k in range(3, len(full) + 1)]
    replayed = _render_chain(name, growing, True, None)
    if name in REPLAYABLE:
        assert replayed > 0, f"{name}: nothing was replayed"
    elif name in {"length", "negative", "cycler", "captured", "in_macro", "whole_list_filters"}:
        assert replayed == 0, f"{name}: replayed iterations that looked at the whole list"


def test_replay_keeps_work_per_rendering_constant_on_a_real_template() -> None:
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer("qwen2.5")
    traced = compile_traced_template(tok.chat_template)
    assert traced is not None
    roles = ["system"] + ["user", "assistant", "tool", "assistant", "tool", "assistant"] * 40
    msgs = tok.prepare([{"role": r, "content": f"text {i}"} for i, r in enumerate(roles)])
    ids = _ids(msgs)
    ref: RenderTrace | None = None
    executed = []
    for k in range(2, len(msgs) + 1):
        variables = {"tools": None, "documents": None, "add_generation_prompt": True, **tok.hf.special_tokens_map}
        text, ref = render_traced(traced, msgs[:k], ids[:k], ref, variables)
        executed.append(len(ref.starts) - ref.replayed)
    assert text == transformers_templates._compile_jinja_template(tok.chat_template).render(messages=msgs, **variables)
    # Each rendering runs the template's loop only over the last few messages, however long the list is.
    assert max(executed[10:]) <= 3, executed


@pytest.mark.parametrize("where", ["before_loop", "in_loop"])
def test_a_printed_date_is_never_replayed_from_another_day(where: str) -> None:
    dated = "{{ strftime_now('%d') }}|" if where == "before_loop" else ""
    body = "{{ strftime_now('%d') }}" if where == "in_loop" else ""
    source = dated + "{%- for m in messages %}<{{ m.role }}>" + body + "{{ m.content }}{% endfor %}" + GEN
    traced = compile_traced_template(source)
    assert traced is not None
    reference = transformers_templates._compile_jinja_template(source)
    envs = [compile_chat_template(source).environment, reference.environment]
    saved = [env.globals["strftime_now"] for env in envs]
    day = ["01"]
    try:
        for env in envs:
            env.globals["strftime_now"] = lambda fmt: day[0]
        msgs = [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(12)]
        ref: RenderTrace | None = None
        variables = {"tools": None, "documents": None, "add_generation_prompt": True}
        for k in range(2, 12):
            day[0] = f"{k // 3:02d}"  # the day changes every third rendering
            text, ref = render_traced(traced, msgs[:k], _ids(msgs[:k]), ref, variables)
            assert text == reference.render(messages=msgs[:k], **variables)
            if where == "in_loop":
                assert ref.replayed == 0
    finally:
        for env, fn in zip(envs, saved, strict=True):
            env.globals["strftime_now"] = fn


def test_a_pinned_date_reaches_a_traced_template_whose_template_was_compiled_again() -> None:
    # The renderer pins the date on compile_chat_template(source)'s environment. That cache holds 16 templates: in a
    # process that compiled others since, the template is compiled again, and the traced one must read the new
    # environment (it read the old one, cached apart: today's date in gpt-oss and SmolLM3 renderings of 16 messages
    # and more, after earlier conversions in the same process).
    source = "{{ strftime_now('%d') }}|{%- for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" + GEN
    assert compile_traced_template(source) is not None
    compile_chat_template.cache_clear()  # as when other templates pushed it out
    env = compile_chat_template(source).environment
    saved = env.globals["strftime_now"]
    env.globals["strftime_now"] = lambda fmt: "pinned"
    try:
        msgs = [{"role": "user", "content": "m0"}]
        variables = {"tools": None, "documents": None, "add_generation_prompt": True}
        text, _ = render_traced(compile_traced_template(source), msgs, _ids(msgs), None, variables)
    finally:
        env.globals["strftime_now"] = saved
    assert text.startswith("pinned|"), text
