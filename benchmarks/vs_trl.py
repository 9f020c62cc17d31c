"""msgtrain convert against TRL's own dataset preparation, on the same real conversations, in one run.

Usage: ``python3 benchmarks/vs_trl.py`` (scales 1, 10, 50; both templates; 1 and 2 workers); ``--help`` for options.
benchmarks/README.md explains the columns.

The conversations: the 370 real ones of ``../shared/real_logs`` that TRL can take as they are (glaive tool calling
in ShareGPT form, the LLaMA-Factory reasoning + tool-use demo, tau-bench airline trajectories), ``×K`` in one of
two modes:

- ``distinct`` (the default, the one issue 38's goal is judged on): copy ``k`` of each file has a copy-specific
  marker (``[copy k]``, a few tokens) in the text of every user, assistant and tool message, so the ``K × 370``
  conversations are all different while their shape (messages, roles, tool calls, turns) and their real sharing (the
  system prompt and tool schemas every conversation of a source has in common) stay. Copy 0 is the real files.
- ``duplicated`` (``--corpus duplicated``): ``K`` byte-level copies of the same conversations (each with its own
  run of trailing blanks, so msgtrain converts each one rather than skipping identical bytes). From the second copy
  on, msgtrain's run-wide memos and its trained-once deduplication serve the copy almost for free while TRL
  prepares it anew: that ratio measures the duplication, not the conversion.

Invariants:
- Both sides start from the same conversations. msgtrain converts the log files as a user runs it; TRL gets, per
  conversation, the OpenAI messages and tools msgtrain's own readers produced from those files (what a TRL user
  would have had to write themselves: that conversion is not timed), as a JSONL file it reads itself.
- TRL's preparation is TRL's code, not a copy: an ``SFTTrainer(assistant_only_loss=True, max_length=None)`` is built
  on a tiny random model (not timed), then the timed part is what the trainer does with a user's data:
  ``json.loads`` of each line, ``Dataset.from_list`` with ``List(Json())`` features for ``messages`` and ``tools``,
  and ``trainer._prepare_dataset`` (TRL's training chat template with generation markers, ``apply_chat_template``
  with ``return_assistant_tokens_mask``, labels). ``dataset_num_proc`` is the worker count.
- Each side runs in its own subprocess; the time quoted is after imports and tokenizer load (process start is
  quoted apart). msgtrain with ``--workers 2`` starts its own pool inside the clock, as a user runs it (TRL's
  ``num_proc=2`` forks inside its clock too).
- One run on one machine: every ratio compares numbers measured in this run. With ``--repeat N`` each row runs
  msgtrain and TRL in turn N times (A B A B ...), and quotes the medians of the times and of the pair-by-pair
  ratios, so a ratio survives a machine whose speed drifts (other jobs on a shared machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core per worker on both sides
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.run import SHARED, TEMPLATES, TOKENIZER, _cpu_seconds, output_digest, run_convert  # noqa: E402

SOURCES = (
    "sharegpt_llamafactory/glaive_toolcall_en_demo.json",
    "sharegpt_llamafactory/reason_tool_use_demo_50.jsonl",
    "tau_bench/gpt-4o-airline.first20.json",
)


CORPUS_MODES = ("distinct", "duplicated")
USER_ROLES = frozenset({"user", "human"})
ASSISTANT_ROLES = frozenset({"assistant", "gpt"})
RESULT_ROLES = frozenset({"tool", "observation", "function", "ipython"})


def copy_marker(k: int) -> str:
    return f"[copy {k}]"


ID_KEYS = frozenset({"id", "tool_call_id", "call_id", "name", "type", "role"})


def _first_value(data: Any) -> str | None:
    """The first non-empty string value of a parsed JSON document that is not an id, a name or a type."""
    if isinstance(data, str):
        return data if data.strip() else None
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        if key in ID_KEYS:
            continue
        found = _first_value(value)
        if found is not None:
            return found
    return None


def _mark_json(text: str, parsed: Any, marker: str) -> str:
    """JSON ``text`` (parsed: ``parsed``) with ``marker`` opening its first string value that is not an id, a name or
    a type; an object with no such value gets the marker as a first member; anything else is left as it is."""
    value = _first_value(parsed)
    if value is None:
        if isinstance(parsed, dict):
            brace = text.find("{") + 1
            return text[:brace] + json.dumps({"copy": marker})[1:-1] + (", " if parsed else "") + text[brace:]
        return text
    for encoded in (json.dumps(value, ensure_ascii=False), json.dumps(value)):
        at = text.find(encoded)
        while at >= 0 and text[:at].rstrip()[-1:] not in (":", ",", "["):  # a value, not a key
            at = text.find(encoded, at + 1)
        if at >= 0:
            return text[: at + 1] + marker + " " + text[at + 1 :]
    return text


def _mark_text(text: str, marker: str) -> str:
    """``text`` with ``marker`` in it, its shape kept. A JSON object or list (a tool result a reader may parse) stays
    valid JSON of the same structure with the same keys and ids (see :func:`_mark_json`); a list of objects (results
    of parallel calls, which a reader splits) has each object marked. Any other text starts with the marker."""
    stripped = text.lstrip()
    if stripped[:1] not in ("{", "["):
        return f"{marker} {text}"
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return f"{marker} {text}"
    if not (isinstance(parsed, list) and parsed and all(isinstance(x, dict) for x in parsed)):
        return _mark_json(text, parsed, marker)
    at = text.index("[") + 1
    decoder, out = json.JSONDecoder(), [text[:at]]
    for item in parsed:
        start = at + len(text[at:]) - len(text[at:].lstrip(" \t\r\n,"))
        _, end = decoder.raw_decode(text, start)
        out += [text[at:start], _mark_json(text[start:end], item, marker)]
        at = end
    return "".join(out) + text[at:]


def _mark_content(content: Any, marker: str) -> Any:
    if isinstance(content, str):
        # Leave empty texts (a tool call's null/empty content) and tagged ones (reasoning a template parses) alone
        return _mark_text(content, marker) if content.strip() and not content.lstrip().startswith("<") else content
    if isinstance(content, list):  # content parts: mark the first text part
        out, done = [], False
        for part in content:
            if not done and isinstance(part, dict) and part.get("type") == "text":
                key = "text" if isinstance(part.get("text"), str) else "value"
                if isinstance(part.get(key), str) and part[key].strip():
                    part, done = {**part, key: _mark_text(part[key], marker)}, True
            out.append(part)
        return out
    return content


def mark_copy(data: Any, k: int) -> Any:
    """``data`` (a parsed source record or file) with copy ``k``'s marker in every user, assistant and tool message
    text; system messages, tool schemas, tool-call arguments and reasoning are left as they are."""
    if isinstance(data, list):
        return [mark_copy(x, k) for x in data]
    if not isinstance(data, dict):
        return data
    role = data.get("role", data.get("from"))
    field_name = "content" if "content" in data else "value"
    if isinstance(role, str) and field_name in data:
        role = role.lower()
        if role in USER_ROLES or role in ASSISTANT_ROLES or role in RESULT_ROLES:
            return {**data, field_name: _mark_content(data[field_name], copy_marker(k))}
        return data
    return {key: mark_copy(v, k) for key, v in data.items()}


def _copy_bytes(src: Path, k: int) -> bytes:
    """Copy ``k`` of ``src`` with its marker, written in the source's layout (JSONL per line; JSON indented)."""
    text = src.read_text(encoding="utf-8")
    if src.suffix == ".jsonl":
        lines = [json.dumps(mark_copy(json.loads(line), k), ensure_ascii=False) for line in text.splitlines() if line]
        return ("\n".join(lines) + "\n").encode("utf-8")
    indent = 2 if text.startswith("[\n  ") or text.startswith("{\n  ") else None
    return (json.dumps(mark_copy(json.loads(text), k), ensure_ascii=False, indent=indent) + "\n").encode("utf-8")


def build_corpus(root: Path, scale: int, mode: str = "distinct") -> Path:
    """``scale`` copies of each source file under distinct names (see the module's docstring for the modes).

    ``duplicated``: msgtrain converts identical bytes once (a second copy is listed under ``files.ignored``), so
    each copy ends in its own run of trailing blanks: JSON and JSONL readers skip whitespace, and every copy is
    converted in full. ``distinct``: copy 0 is the source file as it is, copy ``k`` carries its marker.
    """
    if mode not in CORPUS_MODES:
        raise ValueError(f"corpus mode {mode!r}: expected one of {', '.join(CORPUS_MODES)}")
    out = root / (f"trl-v2-x{scale}" if mode == "duplicated" else f"trl-v3-distinct-x{scale}")
    marker = out / ".complete"
    if marker.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for rel in SOURCES:
        src = SHARED / "real_logs" / rel
        data = src.read_bytes().rstrip(b"\n") + b"\n"
        for k in range(scale):
            dst = out / f"{src.stem}-{k:03d}{src.suffix}"
            if mode == "duplicated":
                dst.write_bytes(data + b" " * (k + 1) + b"\n")
            else:
                dst.write_bytes(data if k == 0 else _copy_bytes(src, k))
    marker.write_text("")
    return out


def conversation_records(corpus: Path) -> list[dict[str, Any]]:
    """Per conversation of the corpus, ``{"messages", "tools"}`` as msgtrain's readers and renderer see it."""
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.core.base import ReadGraph
    from msgtrain.ingest.detect import detect_format
    from msgtrain.ingest.registry import REGISTRY  # noqa: F401 - fills the registry
    from msgtrain.model.openai import to_openai_message

    records = []
    for path in sorted(p for p in corpus.iterdir() if not p.name.startswith(".")):
        for event in read_events(detect_format(path), path):
            if not isinstance(event, ReadGraph):
                continue
            graph = event.graph
            for branch in graph.branches():
                messages = [to_openai_message(n.message, for_template=True) for n in branch.nodes]
                tools = list(graph.env_of(branch.leaf.id).tools)
                records.append({"messages": messages, "tools": tools})
    return records


def write_trl_input(root: Path, corpus: Path) -> Path:
    """TRL's input for ``corpus``: one ``{"messages", "tools"}`` line per conversation, from msgtrain's readers."""
    path = root / f"{corpus.name}.messages.jsonl"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in conversation_records(corpus):
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------------------ TRL side
def child_trl(timing: Path, data: Path, template: str, num_proc: int) -> int:
    """TRL's preparation of ``data`` in this process; writes its timings and output counts to ``timing``."""
    import warnings

    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    import datasets
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    imported = time.perf_counter() - t0
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER))
    override = TEMPLATES[template][0]
    if override is not None:
        tokenizer.chat_template = json.loads(Path(override).read_text())["chat_template"]
    loaded = time.perf_counter() - t0 - imported
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
    )
    features = datasets.Features({"messages": datasets.List(datasets.Json()), "tools": datasets.List(datasets.Json())})
    with open(data, encoding="utf-8") as f:
        first = json.loads(f.readline())
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(
            output_dir=out,
            assistant_only_loss=True,
            max_length=None,  # msgtrain writes whole conversations; so does TRL without truncation
            dataset_num_proc=num_proc,
            use_cpu=True,
            bf16=False,
            report_to=[],
        )
        trainer = SFTTrainer(
            model=Qwen2ForCausalLM(config),
            args=args,
            train_dataset=datasets.Dataset.from_list([first], features=features),
            processing_class=tokenizer,
        )
        started, cpu = time.perf_counter(), _cpu_seconds()
        with open(data, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        dataset = datasets.Dataset.from_list(rows, features=features)
        built = time.perf_counter() - started
        prepared = trainer._prepare_dataset(dataset, tokenizer, args, False, None, "train")
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu
    lengths = prepared.map(
        lambda b: {"n": [len(x) for x in b["input_ids"]], "t": [sum(v != -100 for v in x) for x in b["labels"]]},
        batched=True,
        remove_columns=prepared.column_names,
    )
    result = {
        "seconds": seconds,
        "cpu": cpu,
        "from_list": built,
        "import": imported,
        "tokenizer_load": loaded,
        "rows": len(prepared),
        "tokens": int(sum(lengths["n"])),
        "trained": int(sum(lengths["t"])),
    }
    timing.write_text(json.dumps(result))
    return 0


def run_trl(data: Path, template: str, num_proc: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-trl", str(timing), str(data), template]
        started = time.perf_counter()
        subprocess.run([*cmd, str(num_proc)], check=True)
        result: dict[str, Any] = json.loads(timing.read_text())
        result["wall"] = time.perf_counter() - started
        return result


# ------------------------------------------------------------------------------------------------ main
@dataclass
class Row:
    template: str
    scale: int
    conversations: int
    workers: int
    msgtrain_s: float
    msgtrain_wall: float
    trl_s: float
    trl_wall: float
    msgtrain_tokens: int
    msgtrain_trained: int
    trl_tokens: int
    trl_trained: int
    digest: str
    ratio: float  # the median of the pair-by-pair ratios msgtrain / TRL
    runs: int
    msgtrain_cpu: float  # CPU seconds (user + system, worker processes included) of the same spans
    trl_cpu: float
    cpu_ratio: float  # the median of the pair-by-pair CPU ratios
    # msgtrain's work (one worker; None with a pool, whose counters stay in the workers): characters the encoder was
    # given ÷ characters of the distinct segments the run-wide cache stored (exact while nothing was evicted), and
    # chat template renderings per sampled turn
    encode_ratio: float | None = None
    renders_per_turn: float | None = None
    evicted: int | None = None


def render(rows: list[Row]) -> str:
    head = (
        "| template | conversations | workers | msgtrain s | TRL s | msgtrain / TRL | ms/conv msgtrain | ms/conv TRL "
        "| msgtrain tokens (trained) | TRL tokens (trained) | CPU s msgtrain / TRL (ratio) | pairs "
        "| encoder chars ÷ distinct | renderings / turn |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.template} | {r.conversations} | {r.workers} | {r.msgtrain_s:.2f} | {r.trl_s:.2f} | {r.ratio:.2f} "
            f"| {1000 * r.msgtrain_s / r.conversations:.2f} | {1000 * r.trl_s / r.conversations:.2f} "
            f"| {r.msgtrain_tokens:,} ({r.msgtrain_trained:,}) | {r.trl_tokens:,} ({r.trl_trained:,}) "
            f"| {r.msgtrain_cpu:.2f} / {r.trl_cpu:.2f} ({r.cpu_ratio:.2f}) | {r.runs} "
            f"| {_num(r.encode_ratio)} | {_num(r.renders_per_turn)} |"
        )
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _work(m: Any) -> tuple[float | None, float | None, int | None]:
    """(encoder characters ÷ distinct segment characters, renderings per sampled turn, segments evicted) of one
    msgtrain run, or Nones when its counters stayed in pool workers."""
    work = m.work
    if not work:
        return None, None, None
    turns = m.report["turns"]["found"]
    return (
        work["encoded_chars"] / max(work["stored_chars"], 1),
        work["renders"] / max(turns, 1),
        work["evicted"],
    )


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 10, 50], help="copies of the 370 conversations")
    ap.add_argument(
        "--corpus",
        choices=CORPUS_MODES,
        default="distinct",
        help="distinct: every copy's messages marked, all conversations differ (the goal's corpus); duplicated: "
        "byte copies of the same conversations (msgtrain's memos serve every copy after the first)",
    )
    ap.add_argument("--templates", nargs="+", default=list(TEMPLATES), choices=list(TEMPLATES))
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="msgtrain --workers = TRL num_proc")
    ap.add_argument(
        "--workers-scales", type=int, nargs="+", default=[10], help="scales at which workers > 1 are measured"
    )
    ap.add_argument("--repeat", type=int, default=1, help="msgtrain/TRL pairs per row, run in turn; medians quoted")
    ap.add_argument("--corpus-dir", type=Path, default=ROOT / "benchmarks" / ".corpus")
    ap.add_argument("--json", type=Path, default=None, help="also write every measurement as JSON here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child-trl"]:
        return child_trl(Path(argv[1]), Path(argv[2]), argv[3], int(argv[4]))
    args = _parse(argv)
    if not all((SHARED / "real_logs" / rel).is_file() for rel in SOURCES) or not TOKENIZER.is_dir():
        print(f"skipped: {SHARED} (real logs and tokenizers) is not present beside the checkout")
        return 0
    root = args.corpus_dir
    root.mkdir(parents=True, exist_ok=True)
    print(f"# msgtrain vs TRL · {os.cpu_count()} cpus · python {platform.python_version()} · load {os.getloadavg()}")
    print(
        f"# corpus: {args.corpus}"
        + (
            " (K copies of the same conversations: measures the memos, not the conversion)"
            if args.corpus == "duplicated"
            else " (every copy's user, assistant and tool texts marked: all distinct)"
        )
    )
    rows: list[Row] = []
    for scale in args.scales:
        corpus = build_corpus(root, scale, args.corpus)
        data = write_trl_input(root, corpus)
        with open(data, encoding="utf-8") as f:
            conversations = sum(1 for _ in f)
        for template in args.templates:
            for w in args.workers:
                if w > 1 and scale not in args.workers_scales:
                    continue
                pairs = []
                for _ in range(args.repeat):
                    with tempfile.TemporaryDirectory(dir=root) as tmp:
                        out = Path(tmp) / "out"
                        # -j N as a user runs it: the pool starts inside the clock (TRL's num_proc forks in its own)
                        # No memory sampler: it would take CPU from msgtrain's run only (TRL's runs unsampled)
                        m = run_convert(corpus, out, template, w, warm=False, sample_memory=False)
                        digest = output_digest(out)
                    t = run_trl(data, template, w)
                    pairs.append((m, t, digest))
                if len({d for _, _, d in pairs}) != 1:
                    raise SystemExit(f"msgtrain output differs between runs of {template} x{scale} -j{w}")
                m, t, digest = pairs[-1]
                tokens = m.report["tokens"]
                row = Row(
                    template,
                    scale,
                    conversations,
                    w,
                    statistics.median(p[0].convert_seconds for p in pairs),
                    statistics.median(p[0].seconds for p in pairs),
                    statistics.median(p[1]["seconds"] for p in pairs),
                    statistics.median(p[1]["wall"] for p in pairs),
                    tokens["total"],
                    tokens["trained"],
                    t["tokens"],
                    t["trained"],
                    digest,
                    statistics.median(p[0].convert_seconds / p[1]["seconds"] for p in pairs),
                    len(pairs),
                    statistics.median(p[0].convert_cpu for p in pairs),
                    statistics.median(p[1]["cpu"] for p in pairs),
                    statistics.median(p[0].convert_cpu / p[1]["cpu"] for p in pairs),
                )
                row.encode_ratio, row.renders_per_turn, row.evicted = _work(m)
                rows.append(row)
                each = ", ".join(
                    f"{p[0].convert_seconds / p[1]['seconds']:.2f} (cpu {p[0].convert_cpu / p[1]['cpu']:.2f})"
                    for p in pairs
                )
                print(
                    f"{template} x{scale} ({row.conversations} conversations) -j{w}: msgtrain {row.msgtrain_s:.2f} s "
                    f"(wall {row.msgtrain_wall:.1f}), TRL {row.trl_s:.2f} s (from_list {t['from_list']:.2f}; "
                    f"wall {row.trl_wall:.1f}, imports {t['import']:.1f}), ratio {row.ratio:.2f} "
                    f"(pairs: {each}; "
                    f"load {os.getloadavg()[0]:.1f}); encoder chars ÷ distinct {_num(row.encode_ratio)} "
                    f"(evicted {row.evicted}), renderings / turn {_num(row.renders_per_turn)}",
                    flush=True,
                )
    print()
    print(render(rows))
    print(f"\nload average now {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps([vars(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
