"""Input text in the Unicode encodings a byte-order mark names (UTF-8 with a BOM, UTF-16 LE/BE, UTF-32) is decoded,
a line at a time: a line that is not valid in the file's encoding is one reject whose hint names that encoding, and
every other line converts. Every reader, detection and the chunker open input text through one helper
(``msgtrain.ingest.core.text_input.open_input``)."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from msgtrain.cli import main
from msgtrain.ingest.boundary import open_reader, read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject

CHATS = [
    {"messages": [{"role": "user", "content": word}, {"role": "assistant", "content": f"{word}, indeed 😀"}]}
    for word in ("hi", "café", "naïve", "日本語")
]
BOMS = {"utf-8": codecs.BOM_UTF8, "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}
BOMS |= {"utf-32-le": codecs.BOM_UTF32_LE}


def _jsonl(chats: list[dict[str, object]]) -> str:
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chats)


def _rows(out: Path) -> list[list[int]]:
    return [ids for f in sorted((out / "data").glob("*.parquet")) for ids in pq.read_table(f)["input_ids"].to_pylist()]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
    """The rows of the same chats written as plain UTF-8: what every encoding must give."""
    root = tmp_path_factory.mktemp("plain")
    (root / "chats.jsonl").write_text(_jsonl(CHATS), encoding="utf-8")
    assert main(["convert", str(root / "chats.jsonl"), "-o", str(root / "out"), "-q"]) == 0
    return _rows(root / "out")


@pytest.mark.parametrize("encoding", list(BOMS))
def test_a_jsonl_file_with_a_byte_order_mark_converts_as_its_utf8_twin(
    tmp_path: Path, plain: list[list[int]], encoding: str
) -> None:
    log = tmp_path / "chats.jsonl"
    log.write_bytes(BOMS[encoding] + _jsonl(CHATS).replace("\n", "\r\n").encode(encoding))
    assert main(["convert", str(log), "-o", str(tmp_path / "out"), "-q"]) == 0
    assert _rows(tmp_path / "out") == plain
    assert main(["validate", str(log)]) == 0


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-be"])
def test_a_json_document_and_a_yaml_cassette_with_a_byte_order_mark_are_read(tmp_path: Path, encoding: str) -> None:
    doc = tmp_path / "chats.json"
    doc.write_bytes(BOMS[encoding] + json.dumps(CHATS, ensure_ascii=False, indent=1).encode(encoding))
    events = list(read_events(open_reader(doc), doc))  # type: ignore[arg-type]
    assert [type(e) for e in events] == [ReadGraph] * len(CHATS)
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hé"}, "finish_reason": "stop"}]}
    cassette = {
        "interactions": [
            {
                "request": {
                    "method": "POST",
                    "uri": "https://api.openai.com/v1/chat/completions",
                    "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": "où ?"}]}),
                },
                "response": {"status": {"code": 200}, "body": {"string": json.dumps(reply)}},
            }
        ]
    }
    path = tmp_path / "cassette.yaml"
    path.write_bytes(BOMS[encoding] + yaml.safe_dump(cassette, allow_unicode=True).encode(encoding))
    reader = open_reader(path)
    assert not isinstance(reader, ReadReject) and reader.name == "cassettes"
    assert [type(e) for e in read_events(reader, path)] == [ReadGraph]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_a_line_that_is_not_valid_in_the_files_encoding_is_one_reject_naming_it(tmp_path: Path, encoding: str) -> None:
    newline = "\n".encode(encoding)
    lines = [json.dumps(c, ensure_ascii=False).encode(encoding) for c in CHATS]
    lone = "\ud800".encode(encoding, "surrogatepass")  # a lone surrogate: not UTF-16 text
    lines[2] = lines[2][:20] + lone + lines[2][20:]
    log = tmp_path / "chats.jsonl"
    log.write_bytes(BOMS[encoding] + newline.join(lines) + newline)
    out = tmp_path / "out"
    assert main(["convert", str(log), "-o", str(out), "-q"]) == 3
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["record"], r["reason"]) for r in rejects] == [("line 3", "bad_utf8")]
    name = encoding.upper().replace("-LE", "LE").replace("-BE", "BE")
    assert name in rejects[0]["message"] and name in rejects[0]["hint"]
    assert json.loads((out / "report.json").read_text())["records"]["converted"] == 3


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_text_without_a_byte_order_mark_is_a_reject_whose_hint_names_the_encoding(
    tmp_path: Path, encoding: str
) -> None:
    log = tmp_path / "chats.jsonl"
    log.write_bytes(_jsonl(CHATS).encode(encoding))  # no mark: not decoded, but said as what it is
    reject = open_reader(log)
    assert isinstance(reject, ReadReject) and reject.error.code == "unknown_format"
    name = encoding.upper().replace("-LE", "LE").replace("-BE", "BE")
    assert f"looks like {name} text without a byte-order mark" in reject.error.hint
    assert f"iconv -f {name} -t UTF-8" in reject.error.hint
    # Plain UTF-8 text, JSON or not, is never taken for it.
    log.write_text(_jsonl(CHATS) + "\0 binary-ish tail\n", encoding="utf-8")
    assert not isinstance(open_reader(log), ReadReject)
