"""``stats``: what an exported dataset holds — samples, tokens, trained tokens, turns, cuts, drops, token sources.

Invariants:
- Reads any dataset msgtrain writes (every ``--target``, every ``--format``; :mod:`msgtrain.tools.dataset`): of
  canonical and ``rl`` Parquet only the scalar columns, never the token lists; rows of other targets are turned
  back into samples. Figures a target does not store are None, shown as such. Also reads ``OUT/report.json``
  when present (drop and reject reasons live only there: dropped things are not rows).
- Everything is computed with pyarrow compute and numpy over whole columns; no Python loop runs per token or per
  sample.
- A ``--target tree`` dataset (detected by its ``num_flat_tokens`` column) gets its own summary: rows, samples,
  tokens written, tokens its flat samples would have had and their ratio (:func:`tree_dataset_stats`).
- Shares are of tokens: ``engine_share`` = engine tokens / all tokens, ``trained_share`` = trained / all.
- Per-source figures group by file: a sample's ``source`` is ``file:line`` (or ``file (record)``), and the
  record part is dropped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import MsgtrainError
from msgtrain.tools.dataset import SAMPLE_SCHEMA, data_files, report_of, sample_table, target_of

STATS_COLUMNS = (
    "source",
    "policy",
    "cut_reason",
    "num_tokens",
    "num_trained_tokens",
    "num_turns",
    "engine_tokens",
    "token_source",
)
STATS_SCHEMA = pa.schema([SAMPLE_SCHEMA.field(name) for name in STATS_COLUMNS])
SOURCE_RECORD = r"(:\d+| \([^)]*\))$"  # the record part of "file:12" / "file (item 3)"
BAR_WIDTH = 40


@dataclass
class Distribution:
    """Summary of one per-sample quantity, with a histogram as (low, high, count) bins (high exclusive)."""

    count: int
    total: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: int
    max: int
    bins: list[tuple[int, int, int]]


def distribution(values: np.ndarray, *, integer_bins: bool = False) -> Distribution:
    """Quantiles plus a histogram: one bin per value for small counts, else power-of-two bins."""
    if values.size == 0:
        return Distribution(0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, [])
    lo, hi = int(values.min()), int(values.max())
    if integer_bins and hi - lo < 16:
        edges = np.arange(lo, hi + 2)
    else:
        first = 0 if lo <= 0 else math.floor(math.log2(lo))
        last = math.floor(math.log2(max(hi, 1))) + 1
        edges = np.concatenate([[0] if lo <= 0 else [], 2 ** np.arange(first, last + 1)]).astype(np.int64)
    counts, _ = np.histogram(values, bins=edges)
    # np.histogram closes the last bin on the right; bins here are [low, high), so the max lands in the last one.
    bins = [(int(a), int(b), int(c)) for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)]
    q = np.quantile(values, [0.5, 0.9, 0.99])
    return Distribution(
        count=int(values.size),
        total=int(values.sum()),
        mean=round(float(values.mean()), 3),
        p50=float(q[0]),
        p90=float(q[1]),
        p99=float(q[2]),
        min=lo,
        max=hi,
        bins=bins,
    )


def read_scalar_columns(out: Path) -> tuple[str, pa.Table]:
    """The dataset's target and, per sample, the scalar columns stats reads, plus ``split`` (from the file).

    Columns a target does not store are null; rows of targets without the per-sample counts (``labels``,
    ``trl``, ``packed``) are read whole and turned into samples (:func:`~msgtrain.tools.dataset.sample_table`).
    """
    files = data_files(out)
    target = target_of(files[0].names)
    tables = []
    for f in files:
        if all(c in f.names for c in STATS_COLUMNS):
            t = f.read(list(STATS_COLUMNS))
        else:
            t = sample_table(f.read(), target).select(list(STATS_COLUMNS))
        t = t.cast(STATS_SCHEMA)
        tables.append(t.append_column("split", pa.array([f.split] * t.num_rows, type=pa.string())))
    return target, pa.concat_tables(tables)


def _known(column: pa.ChunkedArray) -> bool:
    """Whether the target stores this column (a column it lacks is all null)."""
    return column.null_count < len(column) or len(column) == 0


def _group(table: pa.Table, key: str) -> dict[str, dict[str, Any]]:
    sums = ["num_tokens", "num_trained_tokens", "num_turns", "engine_tokens"]
    agg = table.group_by(key).aggregate([(c, "sum") for c in sums] + [(key, "count")])
    out: dict[str, dict[str, Any]] = {}
    for row in agg.sort_by(key).to_pylist():
        tokens = int(row["num_tokens_sum"] or 0)
        out[str(row[key])] = {
            "samples": int(row[f"{key}_count"]),
            "tokens": tokens,
            "trained_tokens": int(row["num_trained_tokens_sum"] or 0),
            "turns": int(row["num_turns_sum"] or 0),
            "engine_share": None
            if row["engine_tokens_sum"] is None
            else (round(int(row["engine_tokens_sum"]) / tokens, 6) if tokens else 0.0),
        }
    return out


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    vc = pc.value_counts(column)
    pairs = zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True)
    return dict(sorted(((str(v), int(c)) for v, c in pairs), key=lambda kv: (-kv[1], kv[0])))


def _sum(column: pa.ChunkedArray) -> int:
    value = pc.sum(column).as_py()
    return int(value) if value is not None else 0


TREE_STATS_COLUMNS = ("num_samples", "num_segments", "num_tokens", "num_trained_tokens", "num_flat_tokens")


def tree_dataset_stats(out: Path) -> dict[str, Any]:
    """Statistics of a ``--target tree`` dataset: what the tree rows cost against the flat samples they hold."""
    files = data_files(out)
    tables = []
    for f in files:
        t = f.read(list(TREE_STATS_COLUMNS)).cast(pa.schema([(c, pa.int64()) for c in TREE_STATS_COLUMNS]))
        tables.append(t.append_column("split", pa.array([f.split] * t.num_rows, type=pa.string())))
    table = pa.concat_tables(tables)
    tokens, flat = _sum(table["num_tokens"]), _sum(table["num_flat_tokens"])
    report = report_of(out)
    tree = (report or {}).get("outputs", {}).get("tree", {})
    trained = _sum(table["num_trained_tokens"])
    return {
        "dataset": str(out),
        "target": "tree",
        "format": files[0].format,
        "files": len(files),
        "rows": table.num_rows,
        "splits": _counts(table["split"]),
        "samples": _sum(table["num_samples"]),
        "segments": _sum(table["num_segments"]),
        "tokens": tokens,
        "flat_tokens": flat,
        "flat_per_tree_token": round(flat / tokens, 4) if tokens else 0.0,
        "trie_tokens": tree.get("trie_tokens"),
        "trained_tokens": trained,
        "trained_share": round(trained / tokens, 6) if tokens else 0.0,
        "lengths": {"tokens": asdict(distribution(table["num_tokens"].to_numpy()))},
        "drops": _drops(report) if report is not None else None,
    }


def dataset_stats(out: str | Path) -> dict[str, Any]:
    """All statistics of the dataset at ``out`` (any target, any format) as JSON-ready data.

    Figures a target does not store (policy, source, cut reason, engine tokens of ``labels`` rows, say) are None.
    """
    out = Path(out)
    files = data_files(out)
    if target_of(files[0].names) == "tree":
        return tree_dataset_stats(out)
    target, table = read_scalar_columns(out)
    tokens = _sum(table["num_tokens"])
    trained = _sum(table["num_trained_tokens"])
    engine = _sum(table["engine_tokens"]) if _known(table["engine_tokens"]) else None
    by_file = table.set_column(
        table.schema.get_field_index("source"),
        "source",
        pc.replace_substring_regex(table["source"], pattern=SOURCE_RECORD, replacement=""),
    )
    report = report_of(out)
    packing = ((report or {}).get("outputs") or {}).get("packing")
    return {
        "dataset": str(out),
        "target": target,
        "format": files[0].format,
        "files": len(files),
        "rows": sum(f.num_rows for f in files),
        "samples": table.num_rows,
        "splits": _counts(table["split"]),
        "tokens": tokens,
        "trained_tokens": trained,
        "trained_share": round(trained / tokens, 6) if tokens else 0.0,
        "turns": _sum(table["num_turns"]),
        "engine_tokens": engine,
        "rendered_tokens": None if engine is None else tokens - engine,
        "engine_share": None if engine is None else (round(engine / tokens, 6) if tokens else 0.0),
        "samples_by_token_source": _counts(table["token_source"]) if _known(table["token_source"]) else None,
        "cut_reasons": _counts(table["cut_reason"]) if _known(table["cut_reason"]) else None,
        "packing": {k: packing[k] for k in ("pack_length", "rows", "efficiency") if k in packing} if packing else None,
        "lengths": {
            "tokens": asdict(distribution(table["num_tokens"].to_numpy())),
            "trained_tokens": asdict(distribution(table["num_trained_tokens"].to_numpy())),
            "turns": asdict(distribution(table["num_turns"].to_numpy(), integer_bins=True)),
        },
        "by_policy": _group(table, "policy") if _known(table["policy"]) else None,
        "by_source": _group(by_file, "source") if _known(table["source"]) else None,
        "drops": _drops(report) if report is not None else None,
    }


def _drops(report: dict[str, Any]) -> dict[str, Any]:
    """The reasons things did not become samples, from report.json (whatever parts of it are present)."""
    records = report.get("records") or {}
    turns = report.get("turns") or {}
    samples = report.get("samples") or {}
    return {
        "records_read": records.get("read"),
        "records_rejected": records.get("rejected_by_reason") or {},
        "records_skipped": records.get("skipped_by_reason") or {},
        "turns_found": turns.get("found"),
        "turns_dropped": turns.get("dropped_by_reason") or {},
        "samples_dropped": samples.get("dropped_by_reason") or {},
    }


# ---------------------------------------------------------------------- terminal rendering
def _fmt_range(lo: int, hi: int) -> str:
    return str(lo) if hi - lo == 1 else f"{lo}–{hi - 1}"


def histogram_table(title: str, dist: dict[str, Any]) -> Any:
    """A histogram as a rich table of bars, scaled to the fullest bin."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(justify="right", style="dim")
    t.add_column(justify="right")
    t.add_column(style="cyan")
    peak = max((c for _, _, c in dist["bins"]), default=0)
    for lo, hi, count in dist["bins"]:
        width = round(BAR_WIDTH * count / peak) if peak else 0
        bar = "█" * width if width or not count else "▏"
        t.add_row(_fmt_range(lo, hi), str(count), bar)
    return t


def _reason_line(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{total} (" + ", ".join(f"{k}={v}" for k, v in counts.items()) + ")" if total else "0"


def render_tree_stats(stats: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table

    overview = Table(title=f"msgtrain stats {stats['dataset']} (tree rows)", title_justify="left", show_header=False)
    overview.add_column(style="bold")
    overview.add_column()
    splits = ", ".join(f"{k}={v}" for k, v in stats["splits"].items())
    overview.add_row("rows", f"{stats['rows']} ({splits})" if splits else str(stats["rows"]))
    overview.add_row("samples", f"{stats['samples']} flat samples in {stats['segments']} segments")
    overview.add_row(
        "tokens",
        f"{stats['tokens']} written; the flat samples would have {stats['flat_tokens']} "
        f"({stats['flat_per_tree_token']:g}x)",
    )
    if stats.get("trie_tokens"):
        overview.add_row(
            "trie",
            f"{stats['trie_tokens']} distinct-prefix tokens (tree / trie {stats['tokens'] / stats['trie_tokens']:.4f})",
        )
    overview.add_row("trained tokens", str(stats["trained_tokens"]))
    parts: list[Any] = [overview]
    if stats["rows"]:
        parts.append(histogram_table("tokens per row", stats["lengths"]["tokens"]))
    return Group(*parts)


def render_stats(stats: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if stats.get("target") == "tree":
        return render_tree_stats(stats)

    n = stats["samples"]
    lengths = stats["lengths"]
    target = stats.get("target", "canonical")
    absent = Text(f"not stored by the {target} target", style="dim")
    title = f"msgtrain stats {stats['dataset']}" + ("" if target == "canonical" else f" ({target} rows)")
    overview = Table(title=title, title_justify="left", show_header=False)
    overview.add_column(style="bold")
    overview.add_column()
    splits = ", ".join(f"{k}={v}" for k, v in stats["splits"].items())
    overview.add_row("samples", f"{n} ({splits})" if splits else str(n))
    if stats.get("rows", n) != n:
        overview.add_row("rows", f"{stats['rows']} (each holds several samples)")
    if stats.get("packing"):
        packing = stats["packing"]
        overview.add_row(
            "packing", f"efficiency {packing.get('efficiency', 0):.1%} of {packing.get('pack_length')} tokens per row"
        )
    tok = lengths["tokens"]
    overview.add_row(
        "tokens",
        f"{stats['tokens']} (per sample: mean {tok['mean']:g}, p50 {tok['p50']:g}, "
        f"p90 {tok['p90']:g}, max {tok['max']})",
    )
    overview.add_row("trained tokens", f"{stats['trained_tokens']} ({stats['trained_share']:.1%} of tokens)")
    turns = lengths["turns"]
    overview.add_row("turns", f"{stats['turns']} trained (per sample: mean {turns['mean']:g}, max {turns['max']})")
    if stats["engine_share"] is None:
        overview.add_row("token source", absent)
    else:
        by_source = stats["samples_by_token_source"] or {}
        sources = ", ".join(f"{k}={v}" for k, v in by_source.items())
        overview.add_row(
            "token source",
            f"engine {stats['engine_share']:.1%}, rendered {1 - stats['engine_share']:.1%} of tokens"
            + (f" (samples: {sources})" if sources else "")
            if n
            else "-",
        )
    cuts = stats["cut_reasons"]
    overview.add_row("cut reasons", absent if cuts is None else ", ".join(f"{k}={v}" for k, v in cuts.items()) or "-")
    drops = stats["drops"]
    if drops is None:
        overview.add_row("drops", Text("no report.json: drop and reject reasons unknown", style="yellow"))
    else:
        for label, key in (
            ("rejected records", "records_rejected"),
            ("skipped records", "records_skipped"),
            ("dropped turns", "turns_dropped"),
            ("dropped samples", "samples_dropped"),
        ):
            overview.add_row(label, _reason_line(drops[key]))
    parts: list[Any] = [overview]
    for key, title in (("by_policy", "per policy"), ("by_source", "per source file")):
        if stats[key] is None:
            continue
        t = Table(title=title, title_justify="left")
        for col in (key.removeprefix("by_"), "samples", "tokens", "trained", "turns", "engine"):
            t.add_column(col, justify="left" if col in ("policy", "source") else "right", overflow="fold")
        for name, row in stats[key].items():
            t.add_row(
                name,
                str(row["samples"]),
                str(row["tokens"]),
                str(row["trained_tokens"]),
                str(row["turns"]),
                "-" if row["engine_share"] is None else f"{row['engine_share']:.1%}",
            )
        parts.append(t)
    if n:
        parts.append(histogram_table("tokens per sample", lengths["tokens"]))
        parts.append(histogram_table("trained tokens per sample", lengths["trained_tokens"]))
        parts.append(histogram_table("turns per sample", lengths["turns"]))
    return Group(*parts)


def _plot_title(stats: dict[str, Any]) -> str:
    head = f"{stats['dataset']}: {stats['samples']} samples, {stats['tokens']} tokens"
    if stats.get("target") == "tree":
        return f"{head} in {stats['rows']} tree rows ({stats['flat_tokens']} as flat samples)"
    engine = "" if stats["engine_share"] is None else f", {stats['engine_share']:.0%} from the engine"
    return f"{head} ({stats['trained_share']:.0%} trained{engine})"


def plot_stats(stats: dict[str, Any], path: str | Path) -> Path:
    """Length histograms as a PNG (matplotlib, the optional ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed; must precede pyplot
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        # The installation lacks the optional extra this option needs: a usage error (exit 2, README "Exit codes").
        raise MsgtrainError(
            "--plot needs matplotlib, which is not installed",
            hint="pip install matplotlib (msgtrain's optional 'plot' extra), or drop --plot",
            code="missing_dependency",
        ) from e
    path = Path(path)
    panels: tuple[tuple[str, str], ...] = (
        (("tokens", "tokens per row"),)
        if stats.get("target") == "tree"
        else (
            ("tokens", "tokens per sample"),
            ("trained_tokens", "trained tokens per sample"),
            ("turns", "turns per sample"),
        )
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    axes = axes[0]
    for ax, (key, title) in zip(axes, panels, strict=True):
        bins = stats["lengths"][key]["bins"]
        labels = [_fmt_range(lo, hi) for lo, hi, _ in bins]
        ax.bar(range(len(bins)), [c for _, _, c in bins], color="#3b82f6")
        ax.set_xticks(range(len(bins)), labels, rotation=45, ha="right", fontsize=7)
        ax.set_title(title)
        ax.set_ylabel("samples")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # sample counts are whole numbers
    fig.suptitle(_plot_title(stats), fontsize=9)
    fig.tight_layout()
    try:
        from msgtrain.run.own_files import own_file

        with own_file(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    except OSError as e:
        from msgtrain.errors import OutputError

        raise OutputError(f"cannot write the plot: {e.strerror or e}", where=str(path)) from e
    finally:
        plt.close(fig)
    return path
