"""Chat templates compiled the way transformers compiles them, in a sandbox with faster attribute lookup.

Invariants:
- A template compiled here renders exactly the text ``apply_chat_template`` renders: the environment has
  transformers' options, extensions, filters and globals (copied from transformers' own compiled environment, not
  rewritten), and :class:`_FastSandbox` answers every attribute lookup as :class:`ImmutableSandboxedEnvironment`
  does. The oracle tests compare the two on every shipped template.
- The sandbox stays a sandbox: the same attributes are refused; only the cost of deciding is cut.

Why: templates read ``message.role``, ``message.content``, ``loop.first``… for every message of every rendering,
and the sandbox's ``getattr`` first tries a Python attribute (raising and catching ``AttributeError`` for every
dict key) and re-derives each attribute's safety from scratch. On long conversations that lookup was most of the
rendering time.
"""

from __future__ import annotations

import bisect
import functools
import re
import sys
import threading
import types
from collections import ChainMap
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

# Names a plain dict instance resolves as attributes (its methods and object's): any other name raises
# AttributeError on ``getattr(d, name)``, which is the case the sandbox then answers with ``d[name]``.
_DICT_NAMES = frozenset(dir(dict))
_METHOD_TYPES = (types.MethodType, types.BuiltinMethodType)
_FORMAT_NAMES = ("format", "format_map")
_BUILTIN_METHOD: Any = types.BuiltinMethodType
_PLAIN_TYPES: frozenset[type] = frozenset({str, dict, list, tuple})


class _DictLookupsInline(CodeGenerator):
    """Jinja's code generator, with ``x.name`` and ``x['name']`` (a constant string) compiled to an inline dict
    lookup when ``x`` is a plain ``dict`` holding that key, and to the environment's own ``getattr`` / ``getitem``
    otherwise: ``(x['name'] if type(x := ...) is dict and 'name' in x else environment.getattr(x, 'name'))``.

    For a plain dict and a name it does not define as an attribute, :meth:`_FastSandbox.getattr` answers
    ``x['name']``, and the sandbox's ``getitem`` answers ``x['name']`` for a key the dict holds: the inline path
    gives the same value without the call (templates read ``message.role``, ``message['content']`` for every
    message of every rendering: millions of calls a run). Names a dict defines (``items``, ``get``...) are never
    inlined; every other case is the environment's call, as before."""

    _inline_names = 0

    def _inline(self, node: Any, frame: Any, name: str, fallback: str) -> None:
        self._inline_names += 1
        var = f"_msgtrain_x{self._inline_names}"
        self.write(f"({var}[{name!r}] if type({var} := ")
        self.visit(node, frame)
        self.write(f") is dict and {name!r} in {var} else environment.{fallback}({var}, {name!r}))")

    @optimizeconst
    def visit_Getattr(self, node: nodes.Getattr, frame: Any) -> None:
        if self.environment.is_async or node.attr in _DICT_NAMES:
            super().visit_Getattr(node, frame)
            return
        self._inline(node.node, frame, node.attr, "getattr")

    @optimizeconst
    def visit_Getitem(self, node: nodes.Getitem, frame: Any) -> None:
        arg = node.arg
        if self.environment.is_async or not (isinstance(arg, nodes.Const) and type(arg.value) is str):
            super().visit_Getitem(node, frame)
            return
        self._inline(node.node, frame, arg.value, "getitem")


class _FastSandbox(ImmutableSandboxedEnvironment):
    """:class:`ImmutableSandboxedEnvironment` with the same answers and two shortcuts:

    - a plain ``dict`` and a string name it does not define as an attribute: the sandbox would try ``getattr``,
      catch ``AttributeError`` and subscript; this subscripts directly (an absent key is undefined, as there);
    - the safety of an attribute depends only on the object's type and the name (``is_safe_attribute`` and
      ``modifies_known_mutable`` look at nothing else), so it is decided once per (type, name).
    """

    code_generator_class = _DictLookupsInline

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._safe: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and type(attribute) is str and attribute not in _DICT_NAMES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        try:
            value = getattr(obj, attribute)
        except AttributeError:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                pass
        else:
            # wrap_str_format only ever wraps str.format / str.format_map; skip the call for everything else.
            if type(value) in _METHOD_TYPES and getattr(value, "__name__", None) in _FORMAT_NAMES:
                fmt = self.wrap_str_format(value)
                if fmt is not None:
                    return fmt
            key = (type(obj), attribute)
            safe = self._safe.get(key)
            if safe is None:
                safe = self._safe[key] = self.is_safe_attribute(obj, attribute, value)
            if safe:
                return value
            return self.unsafe_undefined(obj, attribute)
        return self.undefined(obj=obj, name=attribute)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # jinja names it so
        # A method of a plain str, dict, list or tuple (``content.split``, ``content.startswith``…; the sandbox's
        # getattr already refused unsafe ones and wrapped ``format``): the sandbox would find it safely callable
        # (no ``unsafe_callable`` / ``alters_data``) and the context would pass it no context (no ``jinja_pass_arg``),
        # drop the two bookkeeping keywords and call it. This does the same without the lookups.
        if type(__obj) is _BUILTIN_METHOD and type(__obj.__self__) in _PLAIN_TYPES:
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            try:
                return __obj(*args, **kwargs)
            except StopIteration:
                return __self.undefined("value was undefined because a callable raised a StopIteration exception")
        return super().call(__context, __obj, *args, **kwargs)


def _memo_tojson(tojson: Any) -> Any:
    """transformers' ``tojson`` with the text of each container kept while the container lives.

    Templates dump every tool schema and every call's arguments on every rendering. The containers they see are
    msgtrain's prepared copies (made once per node and env, never mutated; the sandbox cannot mutate them either),
    or literals the template builds. Each entry holds its object, so its id cannot be reused while it is cached.
    """
    memo: dict[tuple[int, Any], tuple[Any, str]] = {}

    @functools.wraps(tojson)
    def cached(x: Any, *args: Any, **kwargs: Any) -> Any:
        if type(x) not in (dict, list):
            return tojson(x, *args, **kwargs)
        key = (id(x), (args, tuple(sorted(kwargs.items()))) if args or kwargs else None)
        hit = memo.get(key)
        if hit is not None and hit[0] is x:
            return hit[1]
        text = tojson(x, *args, **kwargs)
        if len(memo) >= 8192:
            memo.clear()
        memo[key] = (x, text)
        return text

    return cached


def _flat_context(template: Any, variables: dict[str, Any]) -> Any | None:
    """The context ``template.render(**variables)`` renders in, built from a flat copy of the template's globals
    (None: another jinja's layout; render its own way).

    jinja's ``Template.render`` builds each context from ``template.globals``, a ``ChainMap`` over the
    environment's globals, iterated twice per rendering (a quarter of a short rendering's fixed cost). The flat copy
    is kept on the template and made again whenever any global changes (``_pinned_date`` in the renderer patches
    ``strftime_now`` for a rendering; a traced template's globals are a view over the plain template's), so every
    rendering sees exactly the globals ``render`` would give it. (A global the copy does not hold is one a map
    before it shadows: whatever it is, the copy is the same.)
    """
    from jinja2.runtime import new_context

    env = template.environment
    maps = getattr(template.globals, "maps", None)
    if not isinstance(maps, list) or len(maps) != 2 or maps[1] is not env.globals:
        return None
    key = tuple(map(id, maps[0].values()))
    for m in env.globals.maps if isinstance(env.globals, ChainMap) else (env.globals,):
        key += tuple(map(id, m.values()))
    cached = template.__dict__.get("_msgtrain_flat_globals")
    if cached is None or cached[0] != key:
        cached = template.__dict__["_msgtrain_flat_globals"] = (key, dict(template.globals))
    return new_context(env, template.name, template.blocks, variables, False, cached[1], None)


def render_template(template: Any, variables: dict[str, Any]) -> str:
    """``template.render(**variables)`` in the context of :func:`_flat_context`."""
    ctx = _flat_context(template, variables)
    if ctx is None:
        return str(template.render(**variables))  # another jinja's layout: its own way
    env = template.environment
    try:
        return str(env.concat(template.root_render_func(ctx)))
    except Exception:
        env.handle_exception()
        raise  # not reached: handle_exception re-raises


@functools.lru_cache(maxsize=16)
def compile_chat_template(source: str) -> Any:
    """The template compiled in a :class:`_FastSandbox` configured as transformers configures its own.

    Cached per template text; a caller that patches ``.environment.globals`` (the render date) must restore it.
    Raises ImportError when this transformers has no ``_compile_jinja_template`` (callers then fall back to
    ``apply_chat_template``).
    """
    from msgtrain.linearize.hf_chat import chat_template_helper

    _compile_jinja_template = chat_template_helper("_compile_jinja_template")

    # transformers builds the same environment whatever the template: take it from the empty template (compiled
    # once per process) rather than compiling this one a second time.
    reference = _compile_jinja_template("").environment
    env = _FastSandbox(
        trim_blocks=reference.trim_blocks,
        lstrip_blocks=reference.lstrip_blocks,
        extensions=[type(ext) for ext in reference.extensions.values()],
    )
    # transformers' own filters and globals (tojson without HTML escaping, raise_exception, strftime_now, its
    # guarded dict and namespace), so the template sees exactly what apply_chat_template gives it.
    env.filters.update(reference.filters)
    env.filters["tojson"] = _memo_tojson(reference.filters["tojson"])
    env.tests.update(reference.tests)
    env.globals.update(reference.globals)
    return env.from_string(source)


# ------------------------------------------------------------------------------------------------ replay
# Rendering every turn's context is quadratic in the conversation: the template walks every earlier message again.
# A traced rendering records, per iteration of the template's loop over ``messages``, where its output starts,
# which message indices it looked at, whether it looked at the list's length or end, and the template's namespace
# state as the iteration began. A later rendering of a list that shares the first ``c`` messages (same template
# inputs otherwise) then runs the template for real but starts its loop at iteration ``j`` with the namespace
# state restored, and splices in the earlier output of iterations ``0..j-1`` — valid when those iterations (and
# everything before the loop) only looked at messages below ``c`` and never at the length: a Jinja loop iteration
# is a function of what it reads and of the state it enters with, and nothing else carries over (loop-scoped
# ``set``; lists are immutable in the sandbox; namespaces are the only mutable state and are restored).
#
# Every way a template can look at ``messages`` goes through :class:`_Messages` (not a list, so C code cannot read
# it past these hooks), the main loop's iterator, or ``loop.changed`` (its state is not restored: such an iteration
# cannot be replayed); any use other than indexing by a non-negative int counts as looking at everything.
# Templates that buffer a loop's output (``{% set x %}…{% endset %}``, ``{% filter %}``) are never replayed.

_PRE = -1  # before the main loop
_POST = -2  # after it
_NEVER = 1 << 62


class _Messages:
    """The ``messages`` a traced rendering sees: the same items, every look recorded."""

    __slots__ = ("_items", "_rec")
    __hash__ = None  # type: ignore[assignment]  # lists are unhashable

    def __init__(self, items: list[Any], rec: _Recorder):
        self._items = items
        self._rec = rec

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int and key >= 0:
            self._rec.observe(key)
        else:  # negative indices and slices depend on the length
            self._rec.observe_all()
        return self._items[key]

    def __len__(self) -> int:
        self._rec.observe_all()
        return len(self._items)

    def __iter__(self) -> Any:
        self._rec.observe_all()
        return iter(self._items)

    def __reversed__(self) -> Any:
        self._rec.observe_all()
        return reversed(self._items)

    def __contains__(self, value: Any) -> bool:
        self._rec.observe_all()
        return value in self._items

    def __bool__(self) -> bool:
        self._rec.observe_all()
        return bool(self._items)

    def _all(self) -> list[Any]:
        self._rec.observe_all()
        return self._items

    def __eq__(self, other: object) -> bool:
        return self._all() == (other._all() if isinstance(other, _Messages) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: Any) -> bool:
        return self._all() < other

    def __le__(self, other: Any) -> bool:
        return self._all() <= other

    def __gt__(self, other: Any) -> bool:
        return self._all() > other

    def __ge__(self, other: Any) -> bool:
        return self._all() >= other

    def __add__(self, other: Any) -> Any:
        return self._all() + (other._all() if isinstance(other, _Messages) else other)

    def __radd__(self, other: Any) -> Any:
        return other + self._all()

    def __mul__(self, n: Any) -> Any:
        return self._all() * n

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return repr(self._all())

    def index(self, *args: Any) -> int:
        return self._all().index(*args)

    def count(self, value: Any) -> int:
        return self._all().count(value)

    def copy(self) -> list[Any]:
        return self._all().copy()


@dataclass
class RenderTrace:
    """What one traced rendering showed: its text and, per iteration ``i`` of the loop over ``messages``, where
    its output started, the highest message index it looked at (the loop's step to ``i + 1`` included), and the
    namespace state it began with. ``blocked`` is the latest iteration a replay may start at: the first one that
    looked at the length or did something that cannot be replayed, or the one before a namespace snapshot that
    cannot be restored (``_NEVER``: no limit). ``loop_state`` is what the loop could read when it started (the
    template's top-level variables, namespaces by content; None: never replay from this trace); ``starts[0]`` is
    where the output before the loop ends. ``ids`` names the rendered messages, so a later list knows how many
    first messages it shares."""

    ids: list[str]
    text: str
    starts: list[int]
    seen: list[int]
    prefix_max: list[int]
    snaps: list[tuple[dict[str, Any], ...]]
    blocked: int
    loop_state: dict[str, Any] | None
    replayed: int = 0  # iterations this rendering took from its reference (for tests and counters)

    def replay_limit(self, shared: int) -> int:
        """How many first iterations a list sharing the first ``shared`` messages may take from this trace (if the
        loop then starts in the same state)."""
        hi = min(self.blocked, len(self.starts) - 1)  # iteration j's start offset is needed
        if hi <= 0 or self.loop_state is None:
            return 0
        return bisect.bisect_left(self.prefix_max, shared, 0, hi)


def _same(a: Any, b: Any, depth: int = 0) -> bool:
    """Type-strict deep equality for frozen template state (``1``, ``1.0`` and ``True`` differ)."""
    if a is b:
        return True
    if type(a) is not type(b) or depth > 64:  # deeper than JSON schemas go
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k], depth + 1) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:
        return False


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _NEVER


class _Recorder:
    def __init__(
        self, items: list[Any], root_code: Any, root_locals: tuple[str, ...], ref: RenderTrace | None, skip_to: int
    ):
        self.items = items
        self.proxy = _Messages(items, self)
        self.root_code = root_code
        self.root_locals = root_locals  # the names of the root code's locals (and cells) that are Jinja's variables
        self.ref = ref
        self.skip_to = skip_to
        self.chunks: list[str] = []
        self.splice_at = -1
        self.out_len = 0
        self.cur = _PRE
        self.main_started = False
        self.loop_state: dict[str, Any] | None = None
        self.namespaces: list[Any] = []
        self.namespace_attrs: list[dict[str, Any]] = []
        self.starts: list[int] = []
        self.seen: list[int] = []
        self.snaps: list[tuple[dict[str, Any], ...]] = []
        self.blocked = _NEVER
        self.stateless = True

    def observe(self, index: int) -> None:
        cur = self.cur
        if cur >= 0 and index > self.seen[cur]:
            self.seen[cur] = index

    def observe_all(self) -> None:
        if self.cur >= 0:
            self.blocked = min(self.blocked, self.cur)

    def _freeze(self, value: Any, depth: int = 0) -> Any:
        """A value the loop can read, as it is now: namespaces by creation order and content (the loop mutates
        them later; a replay restores them by creation order), macros by code and what their closures hold, the
        messages proxy as a marker."""
        if value is self.proxy:
            return _MESSAGES
        if depth > 8:
            return object()  # equal to nothing: deep macro chains are not compared
        if isinstance(value, Namespace):
            index = next((i for i, n in enumerate(self.namespaces) if n is value), -1)
            return ("ns", index, {k: self._freeze(v, depth + 1) for k, v in value._Namespace__attrs.items()})
        if isinstance(value, Macro):
            cells = value._func.__closure__ or ()
            return ("macro", value._func.__code__, value.name, tuple(self._freeze(_cell(c), depth + 1) for c in cells))
        return value

    def main_loop_starts(self, frame_locals: dict[str, Any]) -> int:
        """Called when the main loop is set up: decides where it starts. A replay needs the same output before
        the loop and the same variables and namespace contents (compared by value) as its reference."""
        # Every variable the root frame holds when the loop starts: Jinja's ``l_<depth>_*`` locals, the top-level
        # ``set``s (``l_0_*``, cells included) and those of a ``with`` or an outer ``for`` around the loop
        # (``l_1_*``...). A loop body's own ``set`` is local to it, so these cannot change during the loop.
        names = self.root_locals
        freeze = self._freeze
        self.loop_state = {k: freeze(frame_locals[k]) for k in names if k in frame_locals}
        j, ref = self.skip_to, self.ref
        if j and ref is not None:
            pre = "".join(self.chunks)
            # ref.loop_state is None when ref used a stateful global; this rendering's own use is checked here.
            if (
                ref.loop_state is None
                or not self.stateless
                or not _same(self.loop_state, ref.loop_state)
                or len(pre) != ref.starts[0]
                or pre != ref.text[: ref.starts[0]]
                or len(ref.snaps[j]) != len(self.namespaces)
            ):
                j = 0
        self.skip_to = j
        if j and ref is not None:
            self.starts = ref.starts[:j]
            self.seen = ref.seen[:j]
            self.snaps = ref.snaps[:j]
            for attrs, saved in zip(self.namespace_attrs, ref.snaps[j], strict=True):
                attrs.clear()
                attrs.update(saved)
            self.splice_at = len(self.chunks)
            self.out_len += ref.starts[j] - ref.starts[0]
        return j

    def _snapshot(self, index: int) -> tuple[dict[str, Any], ...]:
        if not self.namespaces:
            return ()
        snap = tuple([attrs.copy() for attrs in self.namespace_attrs])
        if any(isinstance(v, Namespace) for d in snap for v in d.values()):
            # A namespace held by a namespace: restoring this snapshot would hand over the other rendering's inner
            # namespace, so no replay may start here or later.
            self.blocked = min(self.blocked, index - 1)
        return snap

    def begin(self, index: int) -> None:
        """The main loop steps into iteration ``index``."""
        self.cur = index
        self.starts.append(self.out_len)
        self.seen.append(index)
        self.snaps.append(self._snapshot(index) if self.blocked == _NEVER else ())

    def end(self) -> None:
        """The main loop found no next message: it looked at the end of the list."""
        self.observe_all()
        self.cur = _POST

    def made_namespace(self, ns: Any) -> Any:
        if self.cur == _PRE:
            self.namespaces.append(ns)
            self.namespace_attrs.append(ns._Namespace__attrs)  # its own dict for life (a lookup through jinja's code)
        return ns

    def stateful(self) -> None:
        """A global with state across iterations (``cycler``, ``joiner``) was used: nothing is replayed."""
        self.blocked = 0
        self.stateless = False


_MESSAGES = ("msgtrain:messages",)

_JINJA_LOCAL = re.compile(r"l_\d+_")
_active = threading.local()


def _recorder() -> _Recorder | None:
    return getattr(_active, "rec", None)


class _MainIter:
    """The main loop's iterator: each message it hands out is a look at that index, its end a look at the length."""

    __slots__ = ("_i", "_rec")

    def __init__(self, rec: _Recorder, start: int):
        self._rec = rec
        self._i = start

    def __iter__(self) -> _MainIter:
        return self

    def __next__(self) -> Any:
        i = self._i
        if i >= len(self._rec.items):
            self._rec.end()
            raise StopIteration
        self._rec.observe(i)
        self._i = i + 1
        return self._rec.items[i]


class _TrackedLoop(LoopContext):
    """``LoopContext`` for the traced template: the first loop the root code runs over ``messages`` is the main
    loop (tracked, possibly started at a replayed iteration); every other loop is a plain ``LoopContext``."""

    _rec: _Recorder | None = None

    def __init__(self, iterable: Any, undefined: Any, recurse: Any = None, depth0: int = 0) -> None:
        rec = _recorder()
        if (
            rec is not None
            and iterable is rec.proxy
            and not rec.main_started
            and recurse is None
            and sys._getframe(1).f_code is rec.root_code
        ):
            rec.main_started = True
            start = rec.main_loop_starts(sys._getframe(1).f_locals)
            self._rec = rec
            self._iterable = iterable  # loop.length asks the proxy: a look at the length
            self._iterator = _MainIter(rec, start)
            self._undefined = undefined
            self._recurse = recurse
            self.depth0 = depth0
            if start:
                self.index0 = start - 1
                self._current = rec.items[start - 1]  # loop.previtem of the first real iteration
            return
        super().__init__(iterable, undefined, recurse, depth0)

    def __next__(self) -> Any:
        rec = self._rec
        out = super().__next__()  # StopIteration: _MainIter already recorded the end
        if rec is not None:
            rec.begin(self.index0)
        return out

    def changed(self, *value: Any) -> bool:
        if self._rec is not None:
            self._rec.observe_all()  # its state is not restored by a replay
        return bool(super().changed(*value))


def _stateful_global(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _recorder()
        if rec is not None:
            rec.stateful()
        return fn(*args, **kwargs)

    return wrapper


class _LoopEverywhere(NodeTransformer):
    """Makes every ``for`` a ``LoopContext`` loop (Jinja iterates directly when the body never names ``loop``),
    by adding a statement that reads ``loop.index0`` and discards it: output and behaviour are unchanged."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.body.append(nodes.ExprStmt(nodes.Getattr(nodes.Name("loop", "load"), "index0", "load")))
        return node


def _buffers_a_loop(ast: nodes.Template) -> bool:
    blocks = [*ast.find_all(nodes.AssignBlock), *ast.find_all(nodes.FilterBlock)]
    return any(block.find(nodes.For) is not None for block in blocks)


_NOT_MADE = object()


def compile_traced_template(source: str) -> Any | None:
    """The template compiled for traced rendering, or None when it cannot be replayed safely.

    Kept on the plain compiled template (:func:`compile_chat_template`), whose environment's globals it reads (the
    render date ``_pinned_date`` patches there): once that template leaves its cache and is compiled again, the
    date is pinned on the new one, and a traced template cached apart would still read the old one's (today's date
    in a clock-reading template, after a process had compiled 16 other templates)."""
    plain = compile_chat_template(source)
    traced = plain.__dict__.get("_msgtrain_traced", _NOT_MADE)
    if traced is _NOT_MADE:
        traced = plain.__dict__["_msgtrain_traced"] = _compile_traced(plain, source)
    return traced


def _compile_traced(plain: Any, source: str) -> Any | None:
    env = plain.environment
    ast = env.parse(source)
    if _buffers_a_loop(ast):
        return None
    ast = _LoopEverywhere().visit(ast)
    traced_env = env.overlay()
    namespace_cls = env.globals["namespace"]

    def namespace(*args: Any, **kwargs: Any) -> Any:
        ns = namespace_cls(*args, **kwargs)
        rec = _recorder()
        return rec.made_namespace(ns) if rec is not None else ns

    def strftime_now(*args: Any, **kwargs: Any) -> Any:
        # Looked up at call time: the render date is pinned by patching the plain environment's globals. Before the
        # loop the result is part of the output compared before a replay; inside it, the iteration is not replayed
        # (another rendering may have another date).
        rec = _recorder()
        if rec is not None:
            rec.observe_all()
        return env.globals["strftime_now"](*args, **kwargs)

    overrides: dict[str, Any] = {"namespace": namespace, "strftime_now": strftime_now}
    for name in ("cycler", "joiner"):
        if name in env.globals:
            overrides[name] = _stateful_global(env.globals[name])
    # A view over the plain environment's globals, so a pinned render date (patched there) applies here too.
    traced_env.globals = ChainMap(overrides, env.globals)
    template = traced_env.template_class.from_code(
        traced_env, traced_env.compile(ast), traced_env.make_globals(None), None
    )
    template.root_render_func.__globals__["LoopContext"] = _TrackedLoop
    return template


def render_traced(
    template: Any, items: list[Any], ids: list[str], ref: RenderTrace | None, variables: dict[str, Any]
) -> tuple[str, RenderTrace]:
    """Render ``template`` with ``messages=items`` (plus ``variables``), replaying what ``ref`` allows.

    ``ref`` must come from a rendering with the same template and the same ``variables``; whether its iterations
    can be replayed is decided from the trace and, when the loop starts, from the state it starts in.
    """
    shared = 0
    if ref is not None:
        n = min(len(ref.ids), len(ids))
        # Node ids name their whole path, so the lists agree up to the last index where they agree.
        if n and ref.ids[n - 1] == ids[n - 1]:
            shared = n
        else:
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                if ref.ids[mid] == ids[mid]:
                    lo = mid + 1
                else:
                    hi = mid
            shared = lo
    skip_to = ref.replay_limit(shared) if ref is not None else 0
    code = template.root_render_func.__code__
    names = template.__dict__.get("_msgtrain_root_locals")
    if names is None:
        names = template.__dict__["_msgtrain_root_locals"] = tuple(
            k for k in (*code.co_varnames, *code.co_cellvars, *code.co_freevars) if _JINJA_LOCAL.match(k) is not None
        )
    rec = _Recorder(items, code, names, ref, skip_to)
    previous = _recorder()
    _active.rec = rec
    try:
        ctx = _flat_context(template, {"messages": rec.proxy, **variables})
        chunks = template.generate(messages=rec.proxy, **variables) if ctx is None else template.root_render_func(ctx)
        for chunk in chunks:
            rec.chunks.append(chunk)
            rec.out_len += len(chunk)
    except Exception:
        # The proxy is not a list: code that needs a real one (``messages | tojson``) fails where a full rendering
        # would not. Render untraced with the real list (a genuine template error raises again there) and leave a
        # trace nothing replays from.
        _active.rec = None
        text = template.render(messages=items, **variables)
        return text, RenderTrace(ids, text, [], [], [], [], 0, None)
    finally:
        _active.rec = previous
    skip_to = rec.skip_to if rec.main_started else 0
    if skip_to:
        assert ref is not None
        at = rec.splice_at
        text = "".join(
            ["".join(rec.chunks[:at]), ref.text[ref.starts[0] : ref.starts[skip_to]], "".join(rec.chunks[at:])]
        )
        prefix_max = ref.prefix_max[:skip_to]
    else:
        text = "".join(rec.chunks)
        prefix_max = []
    best = prefix_max[-1] if prefix_max else -1
    for s in rec.seen[len(prefix_max) :]:
        best = max(best, s)
        prefix_max.append(best)
    trace = RenderTrace(
        ids=ids,
        text=text,
        starts=rec.starts,
        seen=rec.seen,
        prefix_max=prefix_max,
        snaps=rec.snaps,
        blocked=rec.blocked,
        loop_state=rec.loop_state if rec.stateless else None,
        replayed=skip_to,
    )
    return text, trace
