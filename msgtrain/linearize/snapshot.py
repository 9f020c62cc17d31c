"""Tokenizer snapshots: what the linearizer uses of a transformers tokenizer, stored once and restored without
transformers.

Loading a tokenizer folder through transformers costs about a second per process before any record is read
(resolving the tokenizer class imports much of transformers; ``from_pretrained`` rebuilds the vocabulary in Python),
and every ``--workers`` process pays it again. The first load of a folder stores a snapshot of the *loaded* object:
its backend (``tokenizers.Tokenizer``) serialized as transformers configured it, and the facts the linearizer reads
(added tokens and their strip flags, special ids, EOS, the chat template, the special-tokens map, the length). Later
loads restore the backend with ``tokenizers`` alone.

The backend is restored by *constructing* its BPE model from the stored vocabulary and merges (then the stored
normalizer, pre-tokenizer, post-processor, decoder and added tokens), not by deserializing the JSON: a BPE model
deserialized from ``tokenizer.json`` encoded a conversion's segments about a fifth slower than one constructed from
the same vocabulary and merges (Qwen3, 0.96 against 0.80 s for the same 6,774 calls; transformers constructs Qwen's
this way). A restored backend is used only when it serializes exactly to the stored JSON, so it is the same
tokenizer; other models (Unigram, WordPiece) are loaded through transformers.

Invariants:
- A snapshot is only taken when the tokenizer's ``encode``/``decode`` are its backend's and nothing else: the
  backend decodes alike (transformers' fast class with its own ``decode`` and no clean-up of spaces), ``encode`` of
  probe texts (added tokens, whitespace runs, non-ASCII) equals the backend's ids, and the backend restored from its
  serialization serializes to exactly that again (so it is the same tokenizer, and the tokenizer fingerprint, which
  keys resumed runs, is the same either way).
  Anything else is loaded through transformers every time.
- The key is the content of the folder's files (weights excluded), the snapshot format and the installed
  ``transformers`` and ``tokenizers`` versions: an edited file or an upgrade makes a new snapshot.
- The key is the bytes actually loaded: the folder's files are read once (:func:`read_folder`), hashed, and
  transformers loads a private copy of exactly those bytes, so a file replaced while loading cannot store one
  folder's tokenizer under another's key.
- A snapshot is used only after it is verified: it names the key it was taken for (equal to the folder's key now),
  the digest of its backend's serialization (equal to that of the stored JSON, which the restored backend must
  serialize back to exactly) and a checksum of its facts. An entry that fails any check was changed after it was
  written (hand edits, a broken disk, another tool): it is discarded and rebuilt from the folder, with a
  :class:`~msgtrain.errors.MsgtrainWarning`.
- Anything the snapshot does not hold (``apply_chat_template``, other transformers attributes) is served by the
  transformers tokenizer, loaded on first use; the chat template override is applied to both.
- A backend restored from a verified serialization is kept for the process, keyed by the digest of that
  serialization, and shared by every later load of it (the few used last are kept, as
  :data:`msgtrain.linearize.loading.KEPT` keeps bundles): one folder loaded with two templates, or again after its
  bundle was dropped, is not constructed again (a 150k vocabulary takes about half a second, 200k about a second).
  Restored backends are read, never changed: msgtrain encodes, decodes and serializes with them, and builds its
  plain tokenizers around their model rather than adding tokens to them.
- A snapshot is written to a temporary directory and renamed into place (concurrent runs race harmlessly); one
  this user cannot read is left alone. Snapshots are memos of :mod:`msgtrain.cache` (where they
  live; ``MSGTRAIN_CACHE=0`` turns them off).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from msgtrain.cache import cache_dir, version
from msgtrain.errors import MsgtrainWarning, TokenizerError

FORMAT = 4  # 4: named chat templates (a dict) are kept; 3 dropped them
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".h5", ".msgpack", ".npz")
HASHED_BYTES = 64 * 1024 * 1024  # larger files are no tokenizer's: keyed by name and size, and not loaded
PROBES = (
    "Hello world",
    "  two  spaces\n\n\ttab and newline\r\n",
    "naïve café — 東京 🚀 ﬁ",
    "x" * 40 + " 1234567890 3.14159",
)


def cache_root() -> Path | None:
    return cache_dir("tokenizers")


@dataclass(frozen=True)
class FolderBytes:
    """A tokenizer folder's files as read once: what is hashed into ``key`` is what is loaded (``files``: name →
    bytes of each top-level file that is not weights nor larger than :data:`HASHED_BYTES`)."""

    folder: Path
    key: str
    files: dict[str, bytes] = field(repr=False)

    def load_transformers(self) -> Any:
        """The transformers tokenizer of exactly these bytes: loaded from a private copy of them (never from the
        folder, which may have changed since it was read), named after the folder."""
        from msgtrain.linearize.hf_load import auto_tokenizer

        with tempfile.TemporaryDirectory(prefix="msgtrain-tokenizer-") as tmp:
            for name, data in self.files.items():
                (Path(tmp) / name).write_bytes(data)
            hf = auto_tokenizer(tmp)
        hf.name_or_path = str(self.folder)
        return hf


def read_folder(folder: Path) -> FolderBytes | None:
    """Read a tokenizer folder's files once and key them (None: not a readable local folder)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{FORMAT}\0{version('transformers')}\0{version('tokenizers')}\0".encode())
    files: dict[str, bytes] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
        for entry in entries:
            if not entry.is_file() or entry.name.endswith(WEIGHT_SUFFIXES):
                continue
            h.update(entry.name.encode() + b"\0")
            size = entry.stat().st_size
            data: bytes | None = None
            if size <= HASHED_BYTES:
                with open(entry.path, "rb") as f:
                    data = f.read(HASHED_BYTES + 1)  # a file that grew since stat is still read bounded
            if data is not None and len(data) <= HASHED_BYTES:
                files[entry.name] = data
                h.update(data)
            else:
                h.update(f"large file of {size} bytes".encode())
            h.update(b"\0")
    except OSError:
        return None
    return FolderBytes(folder, h.hexdigest(), files)


def snapshot_key(folder: Path) -> str | None:
    """The content key of a tokenizer folder (None: not a readable local folder)."""
    files = read_folder(folder)
    return None if files is None else files.key


@dataclass(frozen=True)
class AddedToken:
    """An added token as the linearizer reads it (transformers' ``AddedToken`` fields)."""

    content: str
    special: bool
    lstrip: bool
    rstrip: bool
    normalized: bool
    single_word: bool


class SnapshotTokenizer:
    """The transformers tokenizer's surface the linearizer uses, restored from a snapshot."""

    decodes_like_backend = True

    def __init__(
        self, folder: Path, facts: dict[str, Any], backend: Any, backend_json: str | None = None, key: str = ""
    ):
        self.name_or_path = str(folder)
        self.key = key  # the folder key the snapshot was verified against
        self.backend_tokenizer = backend
        self.backend_json = backend_json  # what ``backend.to_str()`` returns, known from restoring it
        self.chat_template: str | dict[str, str] | None = facts["chat_template"]
        self.added_tokens_decoder = {int(i): AddedToken(**t) for i, t in facts["added_tokens"].items()}
        self.added_tokens_encoder = {t.content: i for i, t in self.added_tokens_decoder.items()}
        self.all_special_ids = [int(i) for i in facts["all_special_ids"]]
        self.eos_token_id = facts["eos_token_id"]
        self.special_tokens_map = facts["special_tokens_map"]
        self._len = int(facts["len"])
        self._hf: Any = None

    def __len__(self) -> int:
        return self._len

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: int | list[int], skip_special_tokens: bool = False) -> str:
        """The ids' text, as transformers' fast tokenizer decodes it: one id or a list of them."""
        seq = [ids] if isinstance(ids, int) else ids
        return str(self.backend_tokenizer.decode(seq, skip_special_tokens=skip_special_tokens))

    @overload
    def convert_ids_to_tokens(self, ids: int) -> str | None: ...
    @overload
    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]: ...
    def convert_ids_to_tokens(self, ids: int | list[int]) -> str | list[str | None] | None:
        """Each id's token (an added token's content, else the vocabulary's), as transformers' fast tokenizer
        gives it: one id gives one token, a list a list."""
        if isinstance(ids, int):
            return self._id_to_token(ids)
        return [self._id_to_token(i) for i in ids]

    def _id_to_token(self, i: int) -> str | None:
        t = self.added_tokens_decoder.get(int(i))
        return t.content if t else self.backend_tokenizer.id_to_token(int(i))

    def transformers_tokenizer(self) -> Any:
        """The transformers tokenizer of the folder (loaded on first use), for callers that need its own object:
        TRL tokenizes the preference targets' text by calling it."""
        if self._hf is None:
            self._hf = self._transformers()
        self._hf.chat_template = self.chat_template
        return self._hf

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the snapshot does not hold: the transformers tokenizer, loaded on first use.
        if name.startswith("__") or name == "_hf":
            raise AttributeError(name)
        if self._hf is None:
            self._hf = self._transformers()
        self._hf.chat_template = self.chat_template
        return getattr(self._hf, name)

    def _transformers(self) -> Any:
        """The transformers tokenizer of the folder, from bytes whose key is the snapshot's: a folder changed since
        the snapshot was verified would serve other facts than the snapshot's, so it is an error."""
        files = read_folder(Path(self.name_or_path))
        if files is None or (self.key and files.key != self.key):
            raise TokenizerError(
                "the tokenizer folder changed while msgtrain was using it",
                where=self.name_or_path,
                hint="let whatever writes the folder finish, then run again",
            )
        return files.load_transformers()


def _facts(hf: Any) -> dict[str, Any]:
    return {
        "chat_template": hf.chat_template if isinstance(hf.chat_template, str | dict) else None,
        "added_tokens": {
            str(i): {
                "content": t.content,
                "special": bool(t.special),
                "lstrip": bool(t.lstrip),
                "rstrip": bool(t.rstrip),
                "normalized": bool(t.normalized),
                "single_word": bool(t.single_word),
            }
            for i, t in hf.added_tokens_decoder.items()
        },
        "all_special_ids": [int(i) for i in hf.all_special_ids],
        "eos_token_id": None if hf.eos_token_id is None else int(hf.eos_token_id),
        "special_tokens_map": json.loads(json.dumps(hf.special_tokens_map, default=str)),
        "len": len(hf),
    }


def snapshotable(hf: Any, decodes_alike: bool) -> str | None:
    """The backend's serialization when ``hf`` may be replaced by a snapshot of it, else None (see the module's
    invariants)."""
    if not decodes_alike:
        return None
    backend = hf.backend_tokenizer
    texts = [*PROBES, "".join(f"a {t} b" for t in list(hf.added_tokens_encoder)[:8])]
    for text in texts:
        if list(hf.encode(text, add_special_tokens=False)) != backend.encode(text, add_special_tokens=False).ids:
            return None
    if not isinstance(hf.special_tokens_map, dict):
        return None
    spec = str(backend.to_str())
    try:
        rebuilt = restored(spec, _digest(spec))
    except Exception:  # anything this tokenizers version cannot construct: no snapshot, never a failed load
        return None
    return spec if rebuilt is not None else None


_RESTORED: OrderedDict[str, Any] = OrderedDict()  # digest of a serialization -> the backend restored from it
RESTORED_KEPT = 4  # the backends used last; a run uses one


def restored(spec: str, digest: str) -> Any:
    """:func:`restore` of ``spec`` (whose :func:`_digest` is ``digest``), constructed once per process and shared
    (see the module's invariants): the same backend for every load of the same serialization, None when it cannot
    be constructed exactly."""
    backend = _RESTORED.get(digest)
    if backend is None:
        backend = restore(spec)
        if backend is None:
            return None
        _RESTORED[digest] = backend
    _RESTORED.move_to_end(digest)
    while len(_RESTORED) > RESTORED_KEPT:
        _RESTORED.popitem(last=False)
    return backend


def restore(spec: str) -> Any:
    """The BPE tokenizer ``spec`` (a ``Tokenizer.to_str()``) describes, constructed from its vocabulary and merges, or
    None when that construction does not serialize back to exactly ``spec`` (another model type, truncation or
    padding set, anything the construction does not reproduce)."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import BPE

    data = json.loads(spec)
    model = data.get("model") or {}
    if model.get("type") != "BPE" or data.get("truncation") is not None or data.get("padding") is not None:
        return None
    merges: list[tuple[str, str]] = []
    for m in model["merges"]:  # "a b" in older files, ["a", "b"] in newer ones
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        merges.append((a, b))
    options = {
        k: model[k]
        for k in (
            "dropout",
            "unk_token",
            "continuing_subword_prefix",
            "end_of_word_suffix",
            "fuse_unk",
            "byte_fallback",
            "ignore_merges",
        )
        if model.get(k) is not None
    }
    tok = Tokenizer(BPE(vocab=model["vocab"], merges=merges, **options))
    # The pipeline's other parts, deserialized from the same JSON around an empty model (they are small).
    shell = Tokenizer.from_str(json.dumps({**data, "model": {**model, "vocab": {}, "merges": []}, "added_tokens": []}))
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        value = getattr(shell, part)
        if value is not None:
            setattr(tok, part, value)
    for t in sorted(data.get("added_tokens") or [], key=lambda t: t["id"]):
        token = AddedToken(
            t["content"],
            single_word=t["single_word"],
            lstrip=t["lstrip"],
            rstrip=t["rstrip"],
            normalized=t["normalized"],
            special=t["special"],
        )
        (tok.add_special_tokens if t["special"] else tok.add_tokens)([token])
    return tok if tok.to_str() == spec else None


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _checksum(facts: dict[str, Any]) -> str:
    """The checksum of a snapshot's facts (everything but the checksum itself), as canonical JSON."""
    body = {k: v for k, v in facts.items() if k != "checksum"}
    return _digest(json.dumps(body, sort_keys=True, ensure_ascii=False))


def save(folder: Path | FolderBytes, hf: Any, spec: str) -> None:
    """Store the snapshot of ``hf`` (loaded from exactly ``folder``'s bytes; ``spec`` from :func:`snapshotable`).
    Best effort: a cache that cannot be written is skipped."""
    files = folder if isinstance(folder, FolderBytes) else read_folder(folder)
    root = cache_root()
    if root is None or files is None:
        return
    key = files.key
    final = root / key
    try:
        facts = {**_facts(hf), "key": key, "spec_digest": _digest(spec)}
        facts["checksum"] = _checksum(facts)
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        (tmp / "tokenizer.json").write_text(spec, encoding="utf-8")
        (tmp / "facts.json").write_text(json.dumps(facts, sort_keys=True), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:  # another run stored it first
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, TypeError, ValueError):
        return


class _Tampered(ValueError):
    """A snapshot entry that does not verify (see the module's invariants)."""


def load(folder: Path, files: FolderBytes | None = None) -> SnapshotTokenizer | None:
    """The verified snapshot of ``folder``'s tokenizer (keyed by ``files``, the folder's bytes read once; read here
    when not given), or None (none stored, unreadable, snapshots off, or a tampered entry, which is discarded with a
    warning so that the caller rebuilds it)."""
    root = cache_root()
    if root is None or not folder.is_dir():
        return None
    files = files if files is not None else read_folder(folder)
    if files is None:
        return None
    entry = root / files.key
    try:
        facts_text = (entry / "facts.json").read_text(encoding="utf-8")
        spec = (entry / "tokenizer.json").read_text(encoding="utf-8")
    except OSError:  # none stored, or not readable by this user (a shared cache): left as it is
        return None
    try:
        facts = json.loads(facts_text)
        _verify(facts, spec, files.key)
        backend = restored(spec, facts["spec_digest"])
        if backend is None:  # it restored exactly when it was stored
            raise _Tampered("its tokenizer.json no longer restores to itself")
        return SnapshotTokenizer(folder, facts, backend, spec, files.key)
    except Exception as e:  # tampered or corrupt: rebuilt from the folder
        reason = str(e) if isinstance(e, _Tampered) else f"it does not read ({type(e).__name__}: {e})"
        warnings.warn(
            f"tokenizer snapshot {entry} of {folder} was changed after it was written ({reason});"
            " it is discarded and taken again from the folder",
            MsgtrainWarning,
            stacklevel=2,
        )
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _verify(facts: Any, spec: str, key: str) -> None:
    """Raise :class:`_Tampered` unless the entry was written for ``key`` and its files are as written."""
    if not isinstance(facts, dict):
        raise _Tampered("facts.json is not an object")
    if facts.get("key") != key:
        raise _Tampered("it was taken for another folder content")
    if facts.get("checksum") != _checksum(facts):
        raise _Tampered("facts.json does not match its checksum")
    if facts.get("spec_digest") != _digest(spec):
        raise _Tampered("tokenizer.json does not match the digest of the serialization it was taken from")
