"""A bounded row buffer: accumulate Arrow tables, hand out chunks of at most N rows and T tokens.

Used for parquet row groups, Arrow staging batches and packing buffers. The cut points depend only on the rows'
token counts and the limits, never on how the rows arrived (one big table or many small ones), which is what
makes the writer's output independent of the caller's batching.

Invariants:
- A chunk has at most ``max_rows`` rows (and at most ``room`` when given) and reaches ``max_tokens`` tokens only
  with its last row; it always has at least one row, so a single row longer than ``max_tokens`` still moves.
- Rows come out in the order they went in; nothing is dropped.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from msgtrain.export import arrays


class RowBuffer:
    def __init__(self, max_rows: int, max_tokens: int, length_column: str = "input_ids") -> None:
        self.max_rows = max_rows
        self.max_tokens = max_tokens
        self.length_column = length_column
        self._tables: list[pa.Table] = []
        self._lengths = np.zeros(0, dtype=np.int64)

    @property
    def rows(self) -> int:
        return int(self._lengths.size)

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self._tables.append(table)
            self._lengths = np.concatenate((self._lengths, arrays.lengths_of(table[self.length_column])))

    def take(self, final: bool, room: int | None = None) -> pa.Table | None:
        """The next full chunk, or when ``final`` whatever is left (up to the limits); ``None`` if none is due."""
        if not self._lengths.size:
            return None
        limit = min(self.max_rows, room) if room is not None else self.max_rows
        reaching = np.flatnonzero(np.cumsum(self._lengths[:limit]) >= self.max_tokens)
        count = int(reaching[0]) + 1 if reaching.size else limit
        if count > self._lengths.size:
            if not final:
                return None
            count = self._lengths.size
        buffered = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        chunk = buffered.slice(0, count)
        rest = buffered.slice(count)
        self._tables = [rest] if rest.num_rows else []
        self._lengths = self._lengths[count:]
        return chunk
