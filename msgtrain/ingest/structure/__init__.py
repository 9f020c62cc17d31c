"""The structural reader and its mappings: any JSON/JSONL/Parquet record holding a conversation or calls, read by shape
or by a declared mapping."""
