"""Rendering a turn's context with the chat template: the text the policy was shown.

Invariants:
- The context is rendered exactly as logged: every message on the path, no pairing filter (a client that sent an
  unanswered call sent it), with the env's tools and template kwargs.
- A path whose log strings carry added-token text where the policy did not write it (``<|im_start|>`` typed by a
  user, returned by a tool, in a tool schema's property name or a call's argument key) is rendered with that text
  wrapped in private markers so the encoder keeps it plain text (``TokenizerBundle.mark_message``); an
  assistant's own content and reasoning are never wrapped (templates parse inline ``<think>``). Every other path
  renders untouched.
- Templates run in transformers' sandboxed Jinja environment, bounded in wall time (main thread) and output size.
- Templates that print today's date see the date of the logged call when known, else ``render_date`` when set.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from msgtrain.errors import RenderError
from msgtrain.linearize.content_format import joined_text, resolve_content_format
from msgtrain.linearize.template import RenderTrace
from msgtrain.linearize.tokenizer import (
    SegmentCache,
    TokenizerBundle,
    common_prefix_len,
    membership_table,
    restore_escaped_marks,
)
from msgtrain.model.graph import Env, Node
from msgtrain.model.openai import to_openai_message

MAX_RENDER_SECONDS = 20.0
MAX_TRACES = 16
# Contexts shorter than this are rendered in full, untraced: a trace's bookkeeping costs more than replaying a few
# iterations saves (measured on real tool-calling logs with the Qwen2.5 and Qwen3 templates). Longer contexts are
# traced, so work per rendering stays bounded however long the conversation grows.
MIN_TRACED_MESSAGES = 16
# Whether tracing pays is decided per template, from what its traced renderings replayed (TraceVerdict): a traced
# rendering runs each iteration it does not replay about 2.6x slower than a full one (Qwen3, real logs), so below
# this fraction of iterations replayed it costs more than it saves. Measured on the 3,700 conversations of the TRL
# comparison (contexts of 16 messages and more): Qwen2.5 replays 85 % (traced and full break even), Qwen3 44 % (its
# pass over the whole list before the loop changes its state at every user message: traced 0.85 s, full 0.58 s).
REPLAY_PAYS = 0.6
TRACE_PROBE = 64  # traced renderings a verdict is taken over
TRACE_PAUSE = 15  # after a verdict against tracing, this many probes' worth of renderings go untraced, then a probe
# MSGTRAIN_REPLAY=0 renders every context in full; MSGTRAIN_VERIFY_REPLAY=1 renders in full as well and fails on any
# difference, and renders again what the run-wide memo holds (the test suite runs with it).
REPLAY = os.environ.get("MSGTRAIN_REPLAY", "1") != "0"
VERIFY_REPLAY = os.environ.get("MSGTRAIN_VERIFY_REPLAY") == "1"
MAX_RENDER_CHARS = 256 * 1024 * 1024


class _Timeout(Exception):
    pass


# The render time bound is a watchdog, not a timer per rendering: arming and disarming an interval timer costs two
# system calls, which at tens of thousands of short renderings per file was a measurable share of rendering.
# ``alarm_handler`` installs the handler and a periodic timer (a tick of an eighth of the bound) once for many
# renderings; a rendering only notes when it started, and the tick raises in the rendering that has run longer than
# the bound. So a rendering is stopped between the bound and the bound plus one tick.
_alarm = threading.local()  # .installed, .started (monotonic start of the running rendering or None), .limit


def _on_alarm(signum: int, frame: Any) -> None:
    started = getattr(_alarm, "started", None)
    if started is not None and time.monotonic() - started >= _alarm.limit:
        _alarm.started = None  # one raise per rendering
        raise _Timeout


def _can_alarm() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextlib.contextmanager
def alarm_handler() -> Iterator[None]:
    """Install the render time bound's watchdog (SIGALRM handler and periodic timer) once for many renderings (a
    conversation's); renderings inside it only note their start. Nested uses and other threads are no-ops."""
    if getattr(_alarm, "installed", False) or not _can_alarm():
        yield
        return
    old = signal.signal(signal.SIGALRM, _on_alarm)
    _alarm.installed = True
    _alarm.started = None
    tick = max(MAX_RENDER_SECONDS / 8, 0.01)
    signal.setitimer(signal.ITIMER_REAL, tick, tick)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _alarm.installed = False
        _alarm.started = None
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    if not _can_alarm():
        yield
        return
    with alarm_handler():
        _alarm.limit = seconds
        _alarm.started = time.monotonic()
        try:
            yield
        finally:
            _alarm.started = None


@contextlib.contextmanager
def _pinned_date(tok: TokenizerBundle, when: dt.datetime | None) -> Iterator[None]:
    """Make ``strftime_now`` in the templates return ``when`` (a compiled template is cached per text; a tokenizer
    with named templates renders with either, so each one that reads the clock is pinned)."""
    sources = [t for t in tok.template_texts() if "strftime_now" in t] if when is not None else []
    if not sources:
        yield
        return
    try:
        from msgtrain.linearize.template import compile_chat_template

        envs = [compile_chat_template(t).environment for t in sources]
    except ImportError:  # older transformers: the date cannot be pinned; rendering still works
        yield
        return
    assert when is not None
    olds = [env.globals.get("strftime_now") for env in envs]
    for env in envs:
        env.globals["strftime_now"] = lambda fmt: when.strftime(fmt)
    try:
        yield
    finally:
        for env, old in zip(envs, olds, strict=True):
            env.globals["strftime_now"] = old


# What the run-wide memo of renderings (:class:`RenderCache`) may hold per process and tokenizer: the texts, with a
# fixed overhead per entry. Least recently used first out past it.
RENDER_CACHE_BYTES = 64 << 20
_RENDER_ENTRY_OVERHEAD = 400  # the key (a tuple of a few short strings), the dict entry


class RenderCache:
    """Renderings kept for the whole run by the tokenizer that made them, least recently used first out once their
    texts pass ``max_bytes``; a text over a sixteenth of the bound is never kept.

    Keyed by everything a rendering depends on (see :meth:`Renderer.render`): the template, the content of the
    path, which a graph whose node ids are content hashes names by its last node id and length; the env (tools and
    template kwargs, by content); the generation flag; marking; how list content reaches the template; and the date
    a template that reads the clock is pinned to. So a hit is the text the template would render again: the same
    conversation read twice (a copied log, a re-sent history, the rollouts of one prompt) is rendered once."""

    def __init__(self, max_bytes: int = RENDER_CACHE_BYTES):
        self.max_bytes = max_bytes
        self._texts: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._sizes: dict[tuple[Any, ...], int] = {}
        self.bytes = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._texts)

    def get(self, key: tuple[Any, ...]) -> str | None:
        text = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
            self.hits += 1
        return text

    def clear(self) -> None:
        self._texts.clear()
        self._sizes.clear()
        self.bytes = 0

    def put(self, key: tuple[Any, ...], text: str) -> None:
        size = sys.getsizeof(text) + _RENDER_ENTRY_OVERHEAD
        if key in self._texts or size > self.max_bytes // 16:
            return
        self._texts[key] = text
        self._sizes[key] = size
        self.bytes += size
        while self.bytes > self.max_bytes:
            old, _ = self._texts.popitem(last=False)
            self.bytes -= self._sizes.pop(old)


class TraceVerdict:
    """Whether a template's long contexts are rendered traced, decided from what its traced renderings replayed.

    Traced renderings are taken in probes of ``TRACE_PROBE``; a probe that replayed less than ``REPLAY_PAYS`` of its
    loop iterations turns tracing off for the next ``TRACE_PAUSE * TRACE_PROBE`` long contexts, then probes again
    (a run's later files may replay more: long agent episodes). One per tokenizer (so per template) and process;
    deterministic for a given order of renderings. It changes what a rendering costs, never its text."""

    def __init__(self) -> None:
        self.paused = 0  # long contexts still to render in full
        self.renders = 0  # traced renderings in the current probe
        self.replayed = 0
        self.run = 0
        self.verdicts = 0  # probes judged against tracing (for tests and counters)

    def trace_next(self) -> bool:
        if self.paused:
            self.paused -= 1
            return False
        return True

    def record(self, replayed: int, run: int) -> None:
        self.renders += 1
        self.replayed += replayed
        self.run += run
        if self.renders < TRACE_PROBE:
            return
        if self.replayed < REPLAY_PAYS * (self.replayed + self.run):
            self.paused = TRACE_PAUSE * TRACE_PROBE
            self.verdicts += 1
        self.renders = self.replayed = self.run = 0


def trace_verdict(tok: TokenizerBundle) -> TraceVerdict:
    """The tracing verdict of ``tok``'s template (made on first use; it lives as long as the tokenizer)."""
    verdict = tok.__dict__.get("_trace_verdict")
    if verdict is None:
        verdict = tok.__dict__["_trace_verdict"] = TraceVerdict()
    return verdict


def render_cache(tok: TokenizerBundle) -> RenderCache:
    """The run-wide rendering memo of ``tok`` (made on first use; it lives as long as the tokenizer)."""
    cache = tok.__dict__.get("_render_cache")
    if cache is None:
        cache = tok.__dict__["_render_cache"] = RenderCache()
    return cache


class Renderer:
    """Renders node paths; caches each node's template dict and whether it carries control-token text."""

    def __init__(self, tok: TokenizerBundle, render_date: str | None = None, content_format: str = "auto"):
        self.tok = tok
        self.render_date = dt.datetime.fromisoformat(render_date) if render_date else None
        # How the template reads content (msgtrain.linearize.content_format): list content reaches a string
        # template as its text parts joined, as a serving engine hands it over.
        self.content_format = resolve_content_format(content_format, getattr(tok, "chat_template", None))
        self._dicts: dict[str, dict[str, Any]] = {}
        self._unsafe: dict[str, bool] = {}
        self._unsafe_path: dict[str, bool] = {}
        self._unsafe_env: dict[str, bool] = {}
        # (node id, marked) -> template-ready copy of its message; marked: added-token text in it wrapped in markers
        self._prepared: dict[tuple[str, bool], dict[str, Any]] = {}
        self._prepared_env: dict[tuple[str, bool], list[Any]] = {}
        self._marked_kwargs: dict[tuple[str, bool], dict[str, Any]] = {}
        self._recent_paths: dict[bool, list[tuple[list[dict[str, Any]], list[str]]]] = {False: [], True: []}
        # The latest traced rendering per (generation flag, env, marked): the next rendering of a longer path
        # replays its loop iterations over the messages they share (msgtrain.linearize.template).
        self._traces: OrderedDict[tuple[bool, str, bool], RenderTrace] = OrderedDict()
        # Segment ids shared by every conversation of the run: the tokenizer's cache (None: every text is encoded
        # whole, the reference the shortcuts are tested against).
        self.segments: SegmentCache | None = tok.segment_cache
        # Renderings shared by every conversation of the run whose node ids are content hashes (None: none shared).
        self.shared_renders: RenderCache | None = render_cache(tok)
        self.min_traced = MIN_TRACED_MESSAGES
        # Whether tracing pays for this template (None: every context of min_traced messages or more is traced).
        self.trace_verdict: TraceVerdict | None = trace_verdict(tok)
        self._openers: np.ndarray | None = None
        self._openers_table: np.ndarray | None = None
        self.renders = 0
        self.traced_renders = 0  # renderings that recorded a trace (and could replay)
        self.iterations_run = 0  # the template's loop iterations over messages actually executed
        self.iterations_replayed = 0

    def turn_openers(self) -> np.ndarray:
        """Ids of control tokens that open another turn and never stand inside a sampled reply, found once from a
        probe conversation: those the template writes between a reply and the next user's text (NeMo's
        ``[INST]``; the reply's stop token aside) and, when its generation prompt is empty, the prompt's last one
        (NeMo's ``[/INST]``), less any it writes in the generation prompt or in a reply (ChatML's
        ``<|im_start|>`` opens every turn, gpt-oss's ``<|start|>`` opens each channel of a reply: neither tells
        another turn) and the stop tokens. Empty when the template cannot render the probe."""
        if self._openers is None:
            self._openers = np.zeros(0, dtype=np.int64)
            user = {"role": "user", "content": "msgtrain-opener-probe"}
            reply = {"role": "assistant", "content": "msgtrain-reply-probe"}
            try:
                bare = self.tok.render([user], add_generation_prompt=False)
                prompt = self.tok.render([user], add_generation_prompt=True)
                full = self.tok.render([user, reply], add_generation_prompt=False)
                full_two = self.tok.render([user, reply, user], add_generation_prompt=False)
                thought = {
                    **reply,
                    "reasoning_content": "msgtrain-reasoning-probe",
                    "thinking": "msgtrain-reasoning-probe",
                }
                full += self.tok.render([user, thought], add_generation_prompt=False)[len(bare) :]
            except Exception:  # a template that needs more (a system message, tools): no opener check
                return self._openers
            pattern = self.tok.added_pattern

            def controls(text: str) -> set[str]:
                return {m.group(0) for m in pattern.finditer(text)}

            header = prompt[len(bare) :] if prompt.startswith(bare) else prompt
            shared = common_prefix_len(full, prompt)
            reply_part = full[shared:]
            # The user's header: what the template writes between a reply and the next user's text.
            later = full_two[full_two.find("msgtrain-reply-probe") + 20 : full_two.rfind("msgtrain-opener-probe")]
            found = controls(later)
            if not header:
                last = max(pattern.finditer(prompt), key=lambda m: m.start(), default=None)
                if last is not None:
                    found.add(last.group(0))
            found -= controls(header) | controls(reply_part)
            ids = {self.tok.hf.added_tokens_encoder.get(t) for t in found} - {None} - set(self.tok.stop_ids)
            self._openers = np.array(sorted(i for i in ids if i is not None), dtype=np.int64)
        return self._openers

    def turn_openers_table(self) -> np.ndarray:
        """:meth:`turn_openers` as a membership table (:func:`~msgtrain.linearize.tokenizer.in_table`), made once."""
        if self._openers_table is None:
            openers = self.turn_openers()
            self._openers_table = membership_table(openers.tolist(), int(openers.max()) + 1 if openers.shape[0] else 0)
        return self._openers_table

    def message_dict(self, node: Node) -> dict[str, Any]:
        d = self._dicts.get(node.id)
        if d is None:
            d = to_openai_message(node.message, for_template=True)
            if self.content_format == "string" and isinstance(d.get("content"), list):
                d["content"] = joined_text(d["content"])
            self._dicts[node.id] = d
            self._unsafe[node.id] = self.tok.content_has_control_text(d, assistant=d.get("role") == "assistant")
        return d

    def _prepared_message(self, node: Node, marked: bool) -> dict[str, Any]:
        key = (node.id, marked)
        d = self._prepared.get(key)
        if d is None:
            m = self.message_dict(node)
            d = self._prepared[key] = self.tok.prepare([self.tok.mark_message(m) if marked else m])[0]
        return d

    def _path_lists(self, nodes: Sequence[Node], marked: bool) -> tuple[list[dict[str, Any]], list[str]]:
        """The prepared messages and node ids of a path, extending a recent path that is its prefix (building them
        per rendering, node by node, was quadratic in Python calls). Only a few recent paths are kept."""
        n = len(nodes)
        recent = self._recent_paths[marked]
        best: tuple[list[dict[str, Any]], list[str]] | None = None
        for msgs, ids in recent:
            k = len(ids)
            # Node ids name their whole path: equal ids at k-1 mean equal paths up to k.
            if 0 < k <= n and (best is None or k > len(best[1])) and nodes[k - 1].id == ids[-1]:
                best = (msgs, ids)
        if best is None:
            msgs, ids = [], []
        else:
            msgs, ids = list(best[0]), list(best[1])
        for node in nodes[len(ids) :]:
            msgs.append(self._prepared_message(node, marked))
            ids.append(node.id)
        recent.append((msgs, ids))
        del recent[:-4]
        return msgs, ids

    def _prepared_tools(self, env: Env, marked: bool) -> list[Any]:
        key = (env.id, marked)
        tools = self._prepared_env.get(key)
        if tools is None:
            raw = list(env.tools)
            tools = self._prepared_env[key] = self.tok.prepare(self.tok.mark_content(raw) if marked else raw)
        return tools

    def needs_marking(self, nodes: Sequence[Node], env: Env) -> bool:
        """Whether any log string on the path (messages, tool schemas, template kwargs; keys included) carries
        added-token text that :meth:`TokenizerBundle.mark_message` would wrap.

        Amortised O(1) per turn: a path is unsafe when its parent's path is or its last node is, and paths are
        memoised by node, so only nodes not seen before are scanned.
        """
        i = len(nodes)
        while i > 0 and nodes[i - 1].id not in self._unsafe_path:
            i -= 1
        unsafe = self._unsafe_path[nodes[i - 1].id] if i > 0 else False
        for n in nodes[i:]:
            self.message_dict(n)
            unsafe = unsafe or self._unsafe[n.id]
            self._unsafe_path[n.id] = unsafe
        tools_unsafe = self._unsafe_env.get(env.id)
        if tools_unsafe is None:
            tools_unsafe = self._unsafe_env[env.id] = self.tok.content_has_control_text([list(env.tools), env.kwargs])
        return unsafe or tools_unsafe

    def render(
        self,
        nodes: Sequence[Node],
        env: Env,
        *,
        add_generation_prompt: bool,
        marked: bool = False,
        created: int | None = None,
        shared_ids: bool = False,
    ) -> str:
        """The path rendered with the env's tools and kwargs. ``shared_ids``: the nodes' ids are content hashes
        (:attr:`msgtrain.model.graph.MessageGraph.content_ids`), so the rendering may come from, and goes to, the
        run-wide memo (:class:`RenderCache`)."""
        key: tuple[Any, ...] | None = None
        memo = self.shared_renders
        if memo is not None and shared_ids and nodes:
            # The date a clock-reading template is pinned to is part of what it renders; other templates ignore it.
            # (Unpinned, it prints today's date: not kept, a run may pass midnight.)
            when = (created or self.render_date) if self.tok.reads_clock else None
            if when is not None or not self.tok.reads_clock:
                template = self.tok.template_for(env.tools)  # the text itself: one that a caller swaps is another key
                key = (template, self.content_format, nodes[-1].id, len(nodes), env.id, add_generation_prompt)
                key += (marked, when)
                hit = memo.get(key)
                if hit is not None and not VERIFY_REPLAY:
                    return hit
        msgs, ids = self._path_lists(nodes, marked)
        tools = self._prepared_tools(env, marked)
        text = self._bounded(lambda: self._render_any(ids, msgs, tools, env, add_generation_prompt, marked), created)
        if marked:
            text = restore_escaped_marks(text)
        if memo is not None and key is not None:
            if VERIFY_REPLAY and memo.get(key) not in (None, text):  # the test suite checks every memo hit
                raise RenderError(
                    "a memoized rendering differs from a new one",
                    code="render_memo_mismatch",
                    hint="a msgtrain bug: please report it with this log",
                )
            memo.put(key, text)
        return text

    def render_followed(
        self,
        nodes: Sequence[Node],
        following: Sequence[dict[str, Any]],
        env: Env,
        *,
        marked: bool = False,
        created: int | None = None,
    ) -> str:
        """The path then ``following`` (template messages that are not nodes: what follows a sampled message, see
        :func:`msgtrain.linearize.completion.follower`), rendered in full without the generation prompt."""
        msgs, _ = self._path_lists(nodes, marked)
        extra = self.tok.prepare([self.tok.mark_message(m) if marked else m for m in following])
        tools = self._prepared_tools(env, marked)
        text = self._bounded(lambda: self._render_full([*msgs, *extra], tools, env, False, marked), created)
        return restore_escaped_marks(text) if marked else text

    def _bounded(self, rendering: Callable[[], str], created: int | None) -> str:
        """Run one rendering under the time and size bounds, with the call's date pinned; template failures become
        :class:`RenderError`."""
        when = dt.datetime.fromtimestamp(created, tz=dt.UTC) if created else self.render_date
        self.renders += 1
        self.tok.renders += 1
        try:
            if getattr(_alarm, "installed", False) and (when is None or not self.tok.reads_clock):
                # The common case, without two context managers per rendering: a watchdog is installed (by the file
                # or the conversation) and no date to pin; the rendering notes its start as ``_time_bound`` does.
                _alarm.limit = MAX_RENDER_SECONDS
                _alarm.started = time.monotonic()
                try:
                    text = rendering()
                finally:
                    _alarm.started = None
            else:
                with _pinned_date(self.tok, when), _time_bound(MAX_RENDER_SECONDS):
                    text = rendering()
        except _Timeout:
            raise RenderError(
                f"chat template ran longer than {MAX_RENDER_SECONDS:.0f} s",
                code="template_timeout",
                hint="the template loops on this input; check it with msgtrain audit-template",
            ) from None
        except RenderError:
            raise
        except Exception as e:  # jinja TemplateError, TypeError inside templates, raise_exception(...)
            raise RenderError(
                f"chat template failed: {type(e).__name__}: {e}",
                code="template_error",
                hint="the template cannot render this conversation (unsupported role or feature?)",
            ) from e
        if len(text) > MAX_RENDER_CHARS:
            raise RenderError(
                f"chat template output exceeds {MAX_RENDER_CHARS} characters",
                code="template_output_too_large",
            )
        return text

    def _render_any(
        self,
        ids: list[str],
        msgs: list[dict[str, Any]],
        tools: list[Any],
        env: Env,
        add_generation_prompt: bool,
        marked: bool,
    ) -> str:
        """Traced (replaying what it can) for long contexts, else in full."""
        traced = (
            self._render_traced(ids, msgs, tools, env, add_generation_prompt, marked)
            if REPLAY
            and len(msgs) >= self.min_traced
            and (self.trace_verdict is None or self.trace_verdict.trace_next())
            else None
        )
        if traced is None:
            text = self._render_full(msgs, tools, env, add_generation_prompt, marked)
            self.iterations_run += len(msgs)
            return text
        return traced

    def _kwargs(self, env: Env, marked: bool) -> dict[str, Any]:
        """The env's template kwargs (log strings too: a marked rendering gets them marked)."""
        if not marked or not env.kwargs:
            return env.kwargs
        key = (env.id, True)
        out = self._marked_kwargs.get(key)
        if out is None:
            out = self._marked_kwargs[key] = self.tok.mark_content(dict(env.kwargs))
        return out

    def _render_full(
        self, msgs: list[dict[str, Any]], tools: list[Any], env: Env, add_generation_prompt: bool, marked: bool
    ) -> str:
        return self.tok.render(
            msgs,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            template_kwargs=self._kwargs(env, marked),
            prepared=True,
        )

    def _render_traced(
        self,
        ids: list[str],
        msgs: list[dict[str, Any]],
        tools: list[Any],
        env: Env,
        add_generation_prompt: bool,
        marked: bool,
    ) -> str | None:
        # Not keyed by date: a template that prints it does so before the loop (compared before any replay) or in
        # an iteration (which is then never replayed).
        key = (add_generation_prompt, env.id, marked)
        ref = self._traces.pop(key, None)
        out = self.tok.render_traced(
            msgs,
            ids,
            ref,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            template_kwargs=self._kwargs(env, marked),
        )
        if out is None:
            return None
        text, trace = out
        self._traces[key] = trace
        if len(self._traces) > MAX_TRACES:
            self._traces.popitem(last=False)
        self.traced_renders += 1
        self.iterations_replayed += trace.replayed
        self.iterations_run += len(trace.starts) - trace.replayed
        if self.trace_verdict is not None:
            self.trace_verdict.record(trace.replayed, len(trace.starts) - trace.replayed)
        if (
            VERIFY_REPLAY
            and trace.replayed
            and self._render_full(msgs, tools, env, add_generation_prompt, marked) != text
        ):
            raise RenderError(
                "a replayed rendering differs from a full one",
                code="replay_mismatch",
                hint="a msgtrain bug: please report it with this log; set MSGTRAIN_REPLAY=0 to render in full",
            )
        return text
