"""CPU of the read path alone: every input under the given paths read through the fault boundary
(``open_reader`` + ``read_events``, as ``convert`` reads a file whole), no linearizing, no writing.

Usage: ``python3 benchmarks/read_path.py PATH... [--passes 5] [--digest]``; benchmarks/README.md explains it.

Each pass reads every input once, in one process; the first pass also pays for importing the readers it needs, so
the figures printed are the CPU time (user + sys) of the first pass and the minimum and median of the others. On a
shared machine, compare trees by interleaving their runs and reading the minimum. ``--digest`` prints a hash of
every event read, from one more, untimed pass (graph ids, node ids, messages, engine records, environments;
rejects with their code, message, excerpt and counts; skips): two trees that read alike print the same digest.

Invariants: nothing here changes what msgtrain does; inputs are found as ``convert`` finds them
(:func:`msgtrain.run.plan.discover_inputs`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msgtrain.ingest.boundary import open_reader, read_events  # noqa: E402
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadReject  # noqa: E402
from msgtrain.run.plan import discover_inputs  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def events_of(path: Path) -> Any:
    opened = open_reader(path)
    return [opened] if isinstance(opened, ReadReject) else read_events(opened, path)


def _kind(event: ReadEvent) -> str:
    return "graphs" if isinstance(event, ReadGraph) else "rejects" if isinstance(event, ReadReject) else "skips"


def event_digest(event: ReadEvent) -> bytes:
    """What an event carries to the output, as bytes."""
    if isinstance(event, ReadGraph):
        g = event.graph
        parts: list[Any] = [g.graph_id, g.policy, repr(sorted(g.metadata.items(), key=str)), event.records]
        parts += [str(event.source), json.dumps(event.extras, sort_keys=True, default=str), list(g.head)]
        for node in g.nodes.values():
            parts += [node.id, node.parent, node.env_id, str(node.origin), node.depth, node.message.model_dump_json()]
        parts += [(k, gen.model_dump_json()) for k, gen in g.generations.items()]
        parts += [(env.id, json.dumps(env.tools, default=str), repr(env.template_kwargs)) for env in g.envs.values()]
        return repr(parts).encode("utf-8", "surrogatepass")
    if isinstance(event, ReadReject):
        shown = (str(event.source), event.error.code, str(event.error), event.excerpt, event.count, event.turns)
        return repr(shown).encode("utf-8", "surrogatepass")
    return repr((str(event.source), event.reason, event.count)).encode("utf-8", "surrogatepass")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--passes", type=int, default=5, help="passes over the inputs (the first pays for imports)")
    parser.add_argument("--digest", action="store_true", help="also print a hash of every event read")
    args = parser.parse_args(argv)
    files, _ = discover_inputs(args.paths)
    counts = {"graphs": 0, "rejects": 0, "skips": 0}
    digest = hashlib.sha256()
    times: list[float] = []
    for i in range(max(args.passes, 1)):
        start = cpu_seconds()
        for path in files:
            for event in events_of(path):
                if i == 0:
                    counts[_kind(event)] += 1
        times.append(cpu_seconds() - start)
    if args.digest:  # one more pass, untimed: the digest's own cost is not the read path's
        for path in files:
            for event in events_of(path):
                digest.update(event_digest(event))
    rest = times[1:] or times
    out: dict[str, Any] = {"inputs": len(files), **counts, "cpu_first": round(times[0], 3)}
    out |= {"cpu_min": round(min(rest), 3), "cpu_median": round(statistics.median(rest), 3)}
    if args.digest:
        out["digest"] = digest.hexdigest()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
