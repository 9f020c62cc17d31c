"""Hugging Face tokenizers rebuilt from llama.cpp's vocab-only GGUF files (tests/assets.py), for the test oracle.

transformers can load a GGUF tokenizer (``from_pretrained(dir, gguf_file=...)``), but not every architecture here
(``command-r``, ``gemma4`` fail), and its pure-Python GGUF reader takes minutes on a 256k vocabulary. The rebuild
here reads the GGUF metadata directly (the format is a header and typed key/value pairs; a vocab-only file has no
tensors) and writes a ``tokenizers`` JSON the way llama.cpp reads the same fields (src/llama-vocab.cpp):

- ``tokenizer.ggml.model == "gpt2"``: byte-level BPE (tokens are in GPT-2's byte-to-unicode alphabet), merges as
  listed, the pre-tokenizer regex of ``tokenizer.ggml.pre`` (the original regex of the model's tokenizer.json that
  llama.cpp quotes beside its adapted one).
- ``tokenizer.ggml.model == "gemma4"``: SentencePiece-style BPE over raw UTF-8: spaces become ``▁``, the text is
  split only into runs of newlines and runs of anything else, byte fallback (``<0xNN>`` tokens) for what no merge
  reaches.
- token types CONTROL (3) and USER_DEFINED (4) are added tokens (matched in text before the model runs), special
  when CONTROL; that is how llama.cpp's converter recorded the model's added tokens.

A rebuilt vocabulary is trusted only when it encodes every test string shipped beside it (``.gguf.inp``) to the
ids listed for it (``.gguf.out``): ``check_test_strings`` says which fail, and ``rebuilt_tokenizer_json`` refuses a
vocabulary that fails any. The rebuild is cached beside the unpacked sdist (a temporary file renamed into place),
under a digest of this module's source.

Not rebuilt: ``tokenizer.ggml.model == "llama"`` (SentencePiece by score: llama-spm, phi-3; Phi-3's real tokenizer
is in ../shared), BERT and T5 vocabularies, and pre-tokenizers not in PRE_TOKENIZER_REGEX (a ValueError names it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import assets

# tokenizer.ggml.pre -> pre-tokenizer regexes, applied in order (each splits what the previous ones produced).
PRE_TOKENIZER_REGEX = {
    "llama-bpe": [
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+"
    ],
    "qwen2": [
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+"
    ],
    "qwen35": [
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+"
    ],
    # Command R, StarCoder, Refact: every digit alone, then GPT-2's regex.
    "command-r": [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
    "starcoder": [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
    "gpt-2": [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
}
# Normalizers of the models' own tokenizer.json (GGUF does not record them): Qwen2's and Cohere's NFC; Qwen3.5 none.
NORMALIZER = {"qwen2": "NFC", "command-r": "NFC"}
CONTROL, USER_DEFINED = 3, 4

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (version 2 or 3), strings decoded, arrays as lists."""
    data = path.read_bytes()
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file (magic {data[:4]!r})")
    version, _tensors, count = struct.unpack_from("<IQQ", data, 4)
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version}, this reader knows 2 and 3")
    pos = 24

    def string() -> str:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        return data[pos - n : pos].decode("utf-8", errors="surrogateescape")

    def value(kind: int) -> Any:
        nonlocal pos
        if kind == _STRING:
            return string()
        if kind == _ARRAY:
            inner, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if inner in _SCALAR:
                fmt = _SCALAR[inner]
                size = struct.calcsize(fmt)
                out = list(struct.unpack_from(f"<{n}{fmt[1]}", data, pos))
                pos += n * size
                return out
            return [value(inner) for _ in range(n)]
        fmt = _SCALAR[kind]
        (v,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    meta: dict[str, Any] = {}
    for _ in range(count):
        key = string()
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        meta[key] = value(kind)
    return meta


def _merge_pair(merge: str) -> list[str]:
    # As llama.cpp splits a merge: at the first space after the first character (a token may begin with one).
    cut = merge.find(" ", 1)
    return [merge[:cut], merge[cut + 1 :]]


def tokenizer_spec(meta: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``tokenizers`` JSON for a GGUF vocabulary's metadata (see the module docstring). ``name`` is for errors."""
    model = meta["tokenizer.ggml.model"]
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    merges = [_merge_pair(m) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {t: i for i, t in enumerate(tokens)}
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": types[i] == CONTROL,
        }
        for i, t in enumerate(tokens)
        if types[i] in (CONTROL, USER_DEFINED)
    ]
    if model == "gpt2":
        pre = meta.get("tokenizer.ggml.pre", "gpt-2")
        if pre not in PRE_TOKENIZER_REGEX:
            raise ValueError(f"{name}: no pre-tokenizer regex known for tokenizer.ggml.pre = {pre!r}")
        splits: list[dict[str, Any]] = [
            {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
            for r in PRE_TOKENIZER_REGEX[pre]
        ]
        norm = NORMALIZER.get(pre)
        return {
            "version": "1.0",
            "added_tokens": added,
            "normalizer": {"type": norm} if norm else None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    *splits,
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
                ],
            },
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": pre == "llama-bpe",
                "vocab": vocab,
                "merges": merges,
            },
        }
    if model == "gemma4":
        unk = meta.get("tokenizer.ggml.unknown_token_id")
        return {
            "version": "1.0",
            "added_tokens": added,
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            "pre_tokenizer": {
                "type": "Split",
                "pattern": {"Regex": r"[^\n]+|[\n]+"},
                "behavior": "Isolated",
                "invert": False,
            },
            "post_processor": None,
            "decoder": {
                "type": "Sequence",
                "decoders": [
                    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"},
                    {"type": "Fuse"},
                ],
            },
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": tokens[unk] if unk is not None else None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": True,
                "byte_fallback": True,
                "ignore_merges": False,
                "vocab": vocab,
                "merges": merges,
            },
        }
    raise ValueError(f"{name}: tokenizer.ggml.model = {model!r} is not rebuilt here (gpt2 and gemma4 are)")


def check_test_strings(tokenizer: Any, strings: list[tuple[str, list[int]]]) -> list[str]:
    """The test strings a ``tokenizers.Tokenizer`` encodes differently from their listed ids, each described."""
    bad = []
    for k, (text, want) in enumerate(strings):
        got = tokenizer.encode(text, add_special_tokens=False).ids
        if got != want:
            bad.append(f"#{k} {text[:40]!r}: got {got[:12]}, expected {want[:12]}")
    return bad


# Rebuilds are cached under a digest of this module: a change to how they are made makes new ones.
_REBUILD = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def rebuilt_tokenizer_json(name: str) -> Path | None:
    """``tokenizer.json`` rebuilt from ``ggml-vocab-<name>.gguf`` (cached), or None when the sdist is absent.

    Raises ValueError, naming the failing strings, when the rebuild does not encode the shipped test strings."""
    gguf = assets.gguf_vocab(name)
    if gguf is None:
        return None
    cached = gguf.with_name(f"ggml-vocab-{name}.{_REBUILD}.tokenizer.json")
    if not cached.is_file():
        from tokenizers import Tokenizer

        meta = read_gguf_metadata(gguf)
        text = json.dumps(tokenizer_spec(meta, name), ensure_ascii=False)
        strings = assets.vocab_test_strings(name)
        if strings is None:
            raise ValueError(f"{name}: ships no test strings, so its rebuild cannot be checked")
        bad = check_test_strings(Tokenizer.from_str(text), strings)
        if bad:
            raise ValueError(f"{name}: the rebuilt vocabulary fails {len(bad)} of its test strings: {bad[:3]}")
        _write_atomic(cached, text)
    return cached


@dataclass(frozen=True)
class GgufFamily:
    """A chat-template family assembled offline: a rebuilt GGUF vocabulary and the family's real chat template.

    ``renamed`` gives tokens the later model of a family reassigned in the same vocabulary (Llama 3.1 named three of
    Llama 3's reserved special tokens); ``added`` the special tokens its template writes that the vocabulary file
    lacks, ``added_plain`` the added tokens that are not special (Qwen's and DeepSeek's ``<think>``), both added after
    the vocabulary; ``stop`` what generation_config.json lists as ``eos_token_id`` (what stops generation besides
    ``eos``)."""

    vocab: str
    template: str | None  # a models/templates name, or None for the GGUF's own tokenizer.chat_template
    bos: str | None
    eos: str
    stop: tuple[str, ...] = ()
    renamed: tuple[tuple[int, str], ...] = ()
    added: tuple[str, ...] = ()
    added_plain: tuple[str, ...] = ()


LLAMA31_NAMES = ((128004, "<|finetune_right_pad_id|>"), (128008, "<|eom_id|>"), (128010, "<|python_tag|>"))
LLAMA31_STOP = ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")

GGUF_FAMILIES = {
    "command-r-plus": GgufFamily(
        "command-r", "CohereForAI-c4ai-command-r-plus-tool_use", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"
    ),
    "llama3.1": GgufFamily(
        "llama-bpe",
        "meta-llama-Llama-3.1-8B-Instruct",
        "<|begin_of_text|>",
        "<|eot_id|>",
        LLAMA31_STOP,
        LLAMA31_NAMES,
    ),
    "llama3.2": GgufFamily(
        "llama-bpe",
        "meta-llama-Llama-3.2-3B-Instruct",
        "<|begin_of_text|>",
        "<|eot_id|>",
        LLAMA31_STOP,
        LLAMA31_NAMES,
    ),
    # Hermes 3 is Llama 3.1 fine-tuned on ChatML: the template's <|im_start|>/<|im_end|> are added here.
    "hermes3": GgufFamily(
        "llama-bpe",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        "<|begin_of_text|>",
        "<|im_end|>",
        ("<|im_end|>", "<|end_of_text|>"),
        LLAMA31_NAMES,
        ("<|im_start|>", "<|im_end|>"),
    ),
    # Command R7B's tokenizer is Command R's vocabulary with its response, thinking, action and tool-result tokens.
    "command-r7b": GgufFamily(
        "command-r",
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
        "<BOS_TOKEN>",
        "<|END_OF_TURN_TOKEN|>",
        added=tuple(
            f"<|{edge}_{part}|>"
            for part in ("RESPONSE", "THINKING", "ACTION", "TOOL_RESULT")
            for edge in ("START", "END")
        ),
    ),
    "llama3.3": GgufFamily(
        "llama-bpe",
        "meta-llama-Llama-3.3-70B-Instruct",
        "<|begin_of_text|>",
        "<|eot_id|>",
        LLAMA31_STOP,
        LLAMA31_NAMES,
    ),
    # A fine-tune of Llama 3 with its own tool-call format (">>>name" recipients); its template concatenates the
    # arguments as a string, which serving engines hand it as a dict: replayed without tool turns (oracle.NO_TOOLS).
    "functionary-v3.2": GgufFamily(
        "llama-bpe", "meetkai-functionary-medium-v3.2", "<|begin_of_text|>", "<|eot_id|>", LLAMA31_STOP, LLAMA31_NAMES
    ),
    # DeepSeek-R1 distilled into Llama 3.1: DeepSeek's full-width tokens, added here.
    "deepseek-r1-distill-llama": GgufFamily(
        "llama-bpe",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        added=(
            "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            "<｜User｜>",
            "<｜Assistant｜>",
            *(f"<｜tool▁{part}｜>" for part in ("calls▁begin", "calls▁end", "call▁begin", "call▁end", "sep")),
            *(f"<｜tool▁{part}｜>" for part in ("outputs▁begin", "outputs▁end", "output▁begin", "output▁end")),
        ),
        added_plain=("<think>", "</think>"),
    ),
    # QwQ-32B: Qwen2's vocabulary with Qwen2.5's tool tags and the reasoning tags where Qwen2 kept placeholders.
    "qwq": GgufFamily(
        "qwen2",
        "Qwen-QwQ-32B",
        None,
        "<|im_end|>",
        ("<|im_end|>", "<|endoftext|>"),
        (
            (151657, "<tool_call>"),
            (151658, "</tool_call>"),
            (151665, "<tool_response>"),
            (151666, "</tool_response>"),
            (151667, "<think>"),
            (151668, "</think>"),
        ),
    ),
    "gemma4": GgufFamily(
        "gemma-4", "google-gemma-4-31B-it", "<bos>", "<eos>", ("<eos>", "<turn|>", "<|tool_response>")
    ),
    # The qwen35 test vocabulary keeps Qwen2's placeholders where Qwen3.5 has its reasoning and tool tags: added
    # here, not special, as Qwen3's tokenizer has them.
    "qwen3.5": GgufFamily(
        "qwen35",
        "Qwen3.5-4B",
        None,
        "<|im_end|>",
        ("<|im_end|>", "<|endoftext|>"),
        (),
        added_plain=("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
    ),
}


def record_added_tokens(folder: Path) -> None:
    """Write the added tokens of a saved folder's ``tokenizer.json`` into its ``tokenizer_config.json`` as
    ``added_tokens_decoder`` (id -> the token's fields), as the folders on the hub have them: transformers then takes
    them from there, where without them it parses the whole ``tokenizer.json`` a second time in Python to find them
    (half of a load: about half a second for a vocabulary of 150k tokens). transformers 5's ``save_pretrained`` no
    longer writes them; the tokenizer loaded is the same either way (the same tokens with the same flags)."""
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {
        str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in spec.get("added_tokens") or []
    }
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def family_folder(name: str) -> Path | None:
    """A tokenizer folder (tokenizer.json, tokenizer_config.json with the chat template, generation_config.json)
    for a GGUF_FAMILIES entry, built once and cached beside the unpacked sdist; None when the sdist is absent."""
    family = GGUF_FAMILIES[name]
    spec_path = rebuilt_tokenizer_json(family.vocab)
    if spec_path is None:
        return None
    if family.template is None:
        template = read_gguf_metadata(assets.gguf_vocab(family.vocab) or spec_path)["tokenizer.chat_template"]
    else:
        template = assets.llama_cpp_template(family.template)
    key = hashlib.sha256(json.dumps([repr(family), template, spec_path.name]).encode()).hexdigest()[:12]
    folder = spec_path.parent / "families" / f"{name}-{key}"
    if folder.is_dir():
        return folder
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    by_id = {t["id"]: t for t in spec["added_tokens"]}
    for i, new in family.renamed:
        old = by_id[i]["content"]
        by_id[i]["content"] = new
        spec["model"]["vocab"][new] = spec["model"]["vocab"].pop(old)
    tok = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    for tokens, special in ((family.added, True), (family.added_plain, False)):
        fresh = [t for t in tokens if tok.token_to_id(t) is None]
        tok.add_tokens([AddedToken(t, special=special, normalized=False) for t in fresh])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=family.bos, eos_token=family.eos)
    hf.chat_template = template
    folder.parent.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        hf.save_pretrained(str(tmp))
        record_added_tokens(tmp)
        if family.stop:
            stop = [hf.convert_tokens_to_ids(t) for t in family.stop]
            (tmp / "generation_config.json").write_text(json.dumps({"eos_token_id": stop}), encoding="utf-8")
        try:
            tmp.rename(folder)
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def require_family_folder(name: str) -> Path:
    """``family_folder(name)``, or skip the running test with the reason the sdist is absent."""
    folder = family_folder(name)
    if folder is None:
        import pytest

        pytest.skip(assets.absent_reason())
    return folder
