"""An input file's text as UTF-8 bytes, whatever Unicode encoding its byte-order mark names: the one way readers,
detection and the chunker open an input's text (:func:`open_input`).

Invariants:
- A file without a byte-order mark is read as it is: its bytes, UTF-8 or not (a line that is not UTF-8 is rejected
  on its own, its hint guessing the encoding).
- A file that starts with a byte-order mark (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE) is read through a UTF-8 copy of its
  text without the mark, made once per process and version of the file (path, inode, size, modification time) in
  a temporary folder removed at exit. Line numbers are the file's; byte offsets (chunks, seeks) are the copy's, the
  same in every process, since the copy is a function of the file's bytes.
- The copy is decoded line by line: a line that is not valid text in the file's encoding (a lone surrogate, a cut
  code unit) becomes one line that is not UTF-8 (``\\xff`` first, the rest decoded with replacement characters), so it
  is one ``bad_utf8`` reject whose hint names the encoding (:func:`line_encoding_hint`), and every other line is read.
"""

from __future__ import annotations

import atexit
import codecs
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

from msgtrain.ingest.core import events

# Byte-order marks, longest first (UTF-32 LE starts like UTF-16 LE).
BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32LE"),
    (codecs.BOM_UTF32_BE, "UTF-32BE"),
    (codecs.BOM_UTF8, "UTF-8"),
    (codecs.BOM_UTF16_LE, "UTF-16LE"),
    (codecs.BOM_UTF16_BE, "UTF-16BE"),
)
BAD_LINE = b"\xff"  # starts a copied line that was not valid in its encoding: never UTF-8
_BLOCK = 1 << 20
_MARK = "\udfff"  # what an undecodable code unit becomes while a line is decoded: a lone surrogate
_SURROGATE = re.compile("[\ud800-\udfff]")


def bom_of(head: bytes) -> str | None:
    """The encoding a byte-order mark at the start of ``head`` names (``UTF-8`` included), or None."""
    return next((name for bom, name in BOMS if head.startswith(bom)), None)


def unmarked_utf16(head: bytes) -> str | None:
    """``UTF-16LE`` / ``UTF-16BE`` when ``head`` reads as UTF-16 text without a byte-order mark (ASCII-range text
    leaves every other byte zero), else None. Only named in hints: without a mark such a file is not decoded."""
    sample = head[: 4096 - 4096 % 2] if len(head) >= 4096 else head[: len(head) - len(head) % 2]
    pairs = len(sample) // 2
    if pairs < 8 or bom_of(head) is not None:
        return None
    even, odd = sample[0::2].count(0) / pairs, sample[1::2].count(0) / pairs
    if odd > 0.3 and even < 0.02:
        return "UTF-16LE"
    if even > 0.3 and odd < 0.02:
        return "UTF-16BE"
    return None


def file_encoding(path: Path | str) -> str | None:
    """The encoding ``path``'s byte-order mark names, or None (no mark, or unreadable)."""
    try:
        with open(path, "rb") as f:
            return bom_of(f.read(4))
    except OSError:
        return None


def open_input(path: Path | str) -> BinaryIO:
    """``path`` opened for reading its text as UTF-8 bytes (module docstring). Raises OSError as ``open`` does."""
    f = open(path, "rb")  # noqa: SIM115 - returned open, the caller closes it
    encoding = bom_of(f.read(4))
    if encoding is None:
        f.seek(0)
        return f
    with f:
        st = os.fstat(f.fileno())
        key = (os.fspath(path), st.st_ino, st.st_size, st.st_mtime_ns)
        copy = _COPIES.get(key)
        if copy is not None:
            try:
                return open(copy, "rb")
            except FileNotFoundError:  # removed under the process (a temporary folder cleaner): made again
                pass
        f.seek(0)
        copy = _COPIES[key] = _utf8_copy(f, encoding)
    return open(copy, "rb")


def line_encoding_hint(path: Path | str) -> str:
    """The hint of text that does not decode in a file whose byte-order mark names its encoding."""
    encoding = file_encoding(path) or "UTF-8"
    return (
        f"the line is not valid {encoding} text (the encoding the file's byte-order mark names); fix or drop the "
        "line, the other lines are read as they are"
    )


_COPIES: dict[tuple[str, int, int, int], Path] = {}
_FOLDER: list[Path] = []


def _copies_folder() -> Path:
    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="msgtrain-text-")))
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]


def _mark(error: UnicodeError) -> tuple[str, int]:
    assert isinstance(error, UnicodeDecodeError)
    return _MARK, error.end


codecs.register_error("msgtrain-mark", _mark)


def _utf8_copy(f: BinaryIO, encoding: str) -> Path:
    """A UTF-8 copy of the text of ``f`` (at its start, which holds the byte-order mark of ``encoding``), decoded a
    line at a time (module docstring)."""
    f.read(len(next(bom for bom, name in BOMS if name == encoding)))
    decoder = codecs.getincrementaldecoder(encoding.lower().replace("-", "_"))(errors="msgtrain-mark")
    fd, name = tempfile.mkstemp(dir=_copies_folder(), suffix=".txt")
    with os.fdopen(fd, "wb") as out:
        rest = ""
        while block := f.read(_BLOCK):
            *lines, rest = (rest + decoder.decode(block)).split("\n")
            for line in lines:
                out.write(_line_bytes(line) + b"\n")
            if len(rest) > events.MAX_RECORD_BYTES:  # a line too long to hold: copied on, rejected by its reader
                out.write(_line_bytes(rest))
                rest = ""
        *lines, last = (rest + decoder.decode(b"", final=True)).split("\n")
        for line in lines:
            out.write(_line_bytes(line) + b"\n")
        out.write(_line_bytes(last))  # the file's last line, without a newline when it had none
    return Path(name)


def _line_bytes(line: str) -> bytes:
    if _SURROGATE.search(line) is None:
        return line.encode("utf-8")
    return BAD_LINE + line.encode("utf-8", "replace")
