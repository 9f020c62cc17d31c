"""Mistral tokenizer folders for tests, built at test time from the files mistral-common ships in its package
(``mistral_common/data``); nothing is copied into the repository.

mistral-common ships SentencePiece files of versions v1, v2, v3 and v7 and the tekken file of Mistral NeMo
(``tekken_240911.json``, a v3 tekken). The later tekken versions (v7, v11, v13) differ from it in their ``version``
field and in the special tokens the file declares (``[ARGS]`` and ``[CALL_ID]`` for v11's call encoding, ``[THINK]``
/ ``[/THINK]`` for reasoning from v13), so each is built as a copy of the NeMo vocabulary that declares them, as
Mistral's released files do: the 20 historical control tokens at ranks 0-19, the newer ones past them (ranks 32-35),
the rest ``<SPECIAL_n>`` fillers. mistral-common reads these folders as it reads released ones, and is the oracle.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

# kind → (file name in a model folder, file in mistral_common/data, tekken version to declare or None)
KINDS: dict[str, tuple[str, str, str | None]] = {
    "spm-v1": ("tokenizer.model.v1", "tokenizer.model.v1", None),
    "spm-v2": ("tokenizer.model.v2", "mistral_instruct_tokenizer_240216.model.v2", None),
    "spm-v3": ("tokenizer.model.v3", "mistral_instruct_tokenizer_240323.model.v3", None),
    "spm-v7": ("tokenizer.model.v7", "mistral_instruct_tokenizer_241114.model.v7", None),
    "tekken-v3": ("tekken.json", "tekken_240911.json", None),
    "tekken-v7": ("tekken.json", "tekken_240911.json", "v7"),
    "tekken-v11": ("tekken.json", "tekken_240911.json", "v11"),
    "tekken-v13": ("tekken.json", "tekken_240911.json", "v13"),
}
# Control tokens newer than the 20 every tekken file has, at the ranks released files give them.
_NEWER = {32: "[ARGS]", 33: "[CALL_ID]", 34: "[THINK]", 35: "[/THINK]"}


def mistral_data() -> Path:
    """mistral-common's package data folder (skips the test when mistral-common or SentencePiece is missing)."""
    for pkg in ("mistral_common", "sentencepiece"):
        if importlib.util.find_spec(pkg) is None:
            pytest.skip(f"{pkg} is not installed (pip install 'msgtrain[mistral]')")
    import mistral_common

    return Path(mistral_common.__file__).parent / "data"


def _declared_tekken(shipped: Path, version: str) -> bytes:
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    model = json.loads(shipped.read_bytes())
    model["config"]["version"] = version
    # Listed in rank order with the fillers between them, as released files list them (mistral-common reads a
    # token's text by its place in the list and its id by its rank: the two must agree).
    known = {int(t["rank"]): str(t["token_str"]) for t in Tekkenizer.DEPRECATED_SPECIAL_TOKENS} | _NEWER
    model["special_tokens"] = [
        {"rank": rank, "token_str": known.get(rank, f"<SPECIAL_{rank}>"), "is_control": True}
        for rank in range(max(known) + 1)
    ]
    return json.dumps(model).encode()


def mistral_folder(kind: str, root: Path) -> Path:
    """A model-like folder holding the tokenizer file of ``kind`` under the name a model repository gives it."""
    data = mistral_data()
    name, shipped, version = KINDS[kind]
    if not (data / shipped).is_file():
        pytest.skip(f"mistral-common does not ship {shipped} in this version")
    folder = root / f"mistral-{kind}"
    folder.mkdir(exist_ok=True)
    body = (data / shipped).read_bytes() if version is None else _declared_tekken(data / shipped, version)
    (folder / name).write_bytes(body)
    return folder
