"""Where a ``--tokenizer`` value points, decided before transformers is asked: a local folder or a hub id.

Invariants:
- A value that looks like a path is a folder and never goes to the Hugging Face hub: it starts with ``./``,
  ``../``, ``/`` or ``~``; it holds a separator other than ``/`` (``\\`` on Windows) or more than one ``/``
  (a hub id is ``NAME`` or ``ORG/NAME``); it is not a valid hub id; or its first component exists in the working
  directory (``models/Qwen3-8B`` beside a ``models`` folder). A missing one is "folder not found", naming the
  deepest part of the path that exists and what it holds; never the hub's "Repo id must be in the form ...".
- A folder holds a vocabulary: when none of :data:`VOCAB_FILES` is there, or transformers cannot read the one
  that is (a SentencePiece model without the ``sentencepiece`` package), the error names the files found and the
  files expected, with what each needs.
- A hub id reaches the network only when the hub can be reached: offline mode (``HF_HUB_OFFLINE`` /
  ``TRANSFORMERS_OFFLINE``) or a hub host that does not answer one TCP connect within :data:`PROBE_SECONDS`
  (through the HTTPS proxy when one is set) loads from the local Hugging Face cache only, and a cache miss is one
  error saying so, in seconds rather than the hub client's minute of retries.
- A value ``mistral:PATH``, or a folder holding Mistral's own tokenizer files (``tekken.json``,
  ``tokenizer.model.vN``) and not written ``hf:PATH``, is read by mistral-common (:func:`mistral_selection`,
  :mod:`msgtrain.linearize.mistral`); everything else goes to transformers, where such a folder is refused naming
  mistral-common.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError, TokenizerError

# Vocabulary files, each with what reading it needs beyond transformers (None: nothing).
VOCAB_FILES: dict[str, str | None] = {
    "tokenizer.json": None,
    # transformers converts a SentencePiece model to a fast tokenizer by parsing its protobuf: without protobuf the
    # parse fails with "Error parsing line b'\\x0e'".
    "tokenizer.model": "sentencepiece protobuf",
    "spiece.model": "sentencepiece protobuf",
    "vocab.json": None,  # with merges.txt: a byte-level BPE
    "vocab.txt": None,  # WordPiece
    "tiktoken.model": "tiktoken",
}
# huggingface_hub's rule: NAME or ORG/NAME of word characters, '-' and '.', at most 96 characters each.
_HUB_ID = re.compile(r"(?:[\w.-]{1,96}/)?[\w.-]{1,96}")
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
PROBE_SECONDS = 3.0
DEFAULT_ENDPOINT = "https://huggingface.co"
# The module a pip package installs, where the names differ.
_MODULES = {"protobuf": "google.protobuf"}
# Mistral's own tokenizer files, which only mistral-common reads (vLLM's --tokenizer-mode mistral).
_MISTRAL_NATIVE = re.compile(r"tekken\.json|tokenizer\.model\.v\d+m?\d*|tokenizer\.mm\.model\.v\d+")


MISTRAL_PREFIX = "mistral:"
HF_PREFIX = "hf:"
TEKKEN = "tekken.json"
MISTRAL_INSTALL = "pip install 'msgtrain[mistral]'"


def mistral_files(folder: Path) -> list[Path]:
    """Mistral's own tokenizer files in ``folder``, preferred first (mistral-common's order): ``tekken.json``, then
    ``tokenizer[.mm].model.vN[mM]`` from the highest version."""
    try:
        found = [p for p in folder.iterdir() if _MISTRAL_NATIVE.fullmatch(p.name) and p.is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: (p.name == TEKKEN, [int(d) for d in re.findall(r"\d+", p.name)]), reverse=True)


def mistral_selection(name: str | None) -> tuple[str | None, Path | None]:
    """``(name for transformers, None)`` or ``(None, mistral tokenizer file)`` for a ``--tokenizer`` value (see
    :mod:`msgtrain.linearize.mistral`). A ``mistral:`` value that names no Mistral tokenizer file is a usage error."""
    if name is None:
        return None, None
    if name.startswith(HF_PREFIX):
        return name[len(HF_PREFIX) :], None
    explicit = name.startswith(MISTRAL_PREFIX)
    value = name[len(MISTRAL_PREFIX) :] if explicit else name
    path = Path(value).expanduser()
    if explicit and path.is_file():
        return None, path
    files = mistral_files(path) if path.is_dir() else []
    if files:
        return None, files[0]
    if explicit:
        raise ConfigError(
            f"--tokenizer {name}: {value} is not a Mistral tokenizer file nor a folder holding one",
            hint=f"pass a folder with {TEKKEN} or tokenizer.model.v3 / .v7 (mistral:FOLDER), or the file itself",
            code="no_mistral_tokenizer",
        )
    return name, None


@dataclass(frozen=True)
class TokenizerSource:
    """A resolved ``--tokenizer``: ``folder`` (an existing directory holding a vocabulary) or ``hub_id``."""

    given: str
    folder: Path | None = None
    hub_id: str | None = None


def expected_files() -> str:
    """The vocabulary files a tokenizer folder may hold, each with the package it needs."""
    return ", ".join(
        f"{name} (needs {' and '.join(need.split())})" if need else name for name, need in VOCAB_FILES.items()
    )


def _missing_packages(needs: str | None) -> list[str]:
    return [pkg for pkg in (needs or "").split() if _find_spec(_MODULES.get(pkg, pkg)) is None]


def _find_spec(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package (google) is missing
        return None


def looks_local(value: str) -> bool:
    """Whether ``value`` names a local path rather than a hub id (see the module's invariants)."""
    if value.startswith(("./", "../", "/", "~", ".\\", "..\\")) or value in (".", ".."):
        return True
    separators = {os.sep, os.altsep or os.sep} - {"/"}
    if any(sep in value for sep in separators) or value.count("/") > 1 or re.match(r"[A-Za-z]:[\\/]", value):
        return True
    if _HUB_ID.fullmatch(value) is None or ".." in value or "--" in value:
        return True
    first = value.split("/", 1)[0]
    return os.path.lexists(first) or os.path.lexists(value)


def _listing(folder: Path, limit: int = 8) -> str:
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if not p.name.startswith("."))
    except OSError as e:
        return f"unreadable: {e.strerror or e}"
    if not names:
        return "nothing"
    more = f", … {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _not_found(value: str, path: Path) -> ConfigError:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    shown = "." if str(existing) in ("", ".") else str(existing)
    near = f"; {shown} exists and holds: {_listing(existing)}" if existing != path else ""
    first = value.split("/", 1)[0]
    hub_note = (
        f" (it is read as a folder because {first} exists here; run from another directory to use the hub id)"
        if _HUB_ID.fullmatch(value) and value.count("/") <= 1 and not value.startswith(("/", ".", "~"))
        else ""
    )
    return ConfigError(
        f"tokenizer folder not found: {value}{near}",
        hint="pass the folder that holds tokenizer.json and tokenizer_config.json" + hub_note,
        code="tokenizer_not_found",
    )


def check_folder(folder: Path, given: str) -> None:
    """Raise when ``folder`` holds no vocabulary file, naming the files expected (and a template-only folder's
    fix: its template paired with the tokenizer whose vocabulary it shares)."""
    if any((folder / name).is_file() for name in VOCAB_FILES):
        return
    native = sorted(p.name for p in folder.iterdir() if _MISTRAL_NATIVE.fullmatch(p.name)) if folder.is_dir() else []
    if native:
        raise ConfigError(
            f"tokenizer folder {given} holds Mistral's own tokenizer ({', '.join(native)}), which only mistral-common"
            f" reads; msgtrain encodes with a Hugging Face tokenizer (expected one of: {expected_files()})",
            hint=f"msgtrain encodes it through mistral-common when given as --tokenizer {given} or mistral:{given}"
            f" ({MISTRAL_INSTALL}); a command that needs a chat template needs the model's Hugging Face tokenizer"
            " folder (tokenizer.json + tokenizer_config.json, published beside the Mistral files)",
            code="mistral_native_tokenizer",
        )
    config = folder / "tokenizer_config.json"
    hint = (
        "this folder only holds a chat template: load a tokenizer with the same vocabulary and take the template "
        f"from here: --tokenizer OTHER_FOLDER --chat-template {config}"
        if config.is_file()
        else "pass the folder of a Hugging Face tokenizer (e.g. one made with `hf download ORG/NAME --local-dir DIR`)"
    )
    raise ConfigError(
        f"tokenizer folder {given} holds no tokenizer vocabulary (expected one of: {expected_files()}; "
        f"it holds: {_listing(folder)})",
        hint=hint,
        code="no_vocabulary",
    )


def resolve_tokenizer(value: str, *, download: bool) -> TokenizerSource:
    """Decide what ``value`` names: a checked local folder, or a hub id. A hub id that is not to be downloaded
    (``download`` false, offline mode, or the hub unreachable) is the folder of its cached snapshot."""
    if not looks_local(value):
        reason = offline_reason() if download else "msgtrain's tools read only local tokenizers"
        return TokenizerSource(value, hub_id=value) if reason is None else from_cache(value, reason)
    path = Path(value).expanduser()
    if not path.exists():
        raise _not_found(value, path)
    if not path.is_dir():
        raise ConfigError(
            f"--tokenizer must be a folder, not a file: {value}",
            hint=f"pass the folder that holds it: --tokenizer {path.parent}",
            code="tokenizer_not_a_folder",
        )
    check_folder(path, value)
    return TokenizerSource(value, folder=path)


def unreadable_vocabulary(folder: Path, given: str, error: BaseException) -> TokenizerError:
    """transformers failed on a folder that has a vocabulary file: name what was found, what was expected, and a
    missing package the found files need."""
    found = [name for name in VOCAB_FILES if (folder / name).is_file()]
    missing = sorted({pkg for name in found for pkg in _missing_packages(VOCAB_FILES[name])})
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    hint = (
        f"pip install {' '.join(missing)} (the files here need it), or add a tokenizer.json"
        if missing
        else "check that the folder is a complete Hugging Face tokenizer (tokenizer.json + tokenizer_config.json)"
    )
    return TokenizerError(
        f"cannot read the tokenizer in {given}: {type(error).__name__}: {first} (found: {', '.join(found)}; "
        f"expected one of: {expected_files()})",
        hint=hint,
        code="unsupported_vocabulary",
    )


def offline_reason() -> str | None:
    """Why the hub cannot be used now, or None: offline mode is set, or its host does not accept a connection."""
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{name} is set"
    import urllib.parse
    import urllib.request  # the proxy settings (and the HTTP client with them) only when the hub is asked

    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(endpoint.scheme or "https")
    if proxy and not urllib.request.proxy_bypass(host):
        parsed = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = parsed.hostname or host, parsed.port or 3128
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            return None
    except OSError as e:
        return f"{host}:{port} cannot be reached ({e.strerror or str(e) or type(e).__name__})"


def cached_folder(hub_id: str) -> Path | None:
    """The folder of ``hub_id``'s newest snapshot in the local Hugging Face cache, or None (no network used)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(hub_id, local_files_only=True))
    except (ImportError, OSError, ValueError):  # not cached (LocalEntryNotFoundError is an OSError), bad id
        return None


def from_cache(hub_id: str, why: str) -> TokenizerSource:
    """``hub_id`` as the folder of its cached snapshot; a miss is one error saying why the hub was not asked."""
    folder = cached_folder(hub_id)
    if folder is None:
        raise TokenizerError(
            f"tokenizer {hub_id!r} is not in the local Hugging Face cache, and the hub was not asked: {why}",
            hint="pass a local tokenizer folder (--tokenizer /models/NAME), or download it where there is network: "
            f"`hf download {hub_id} --local-dir DIR`, then --tokenizer DIR",
            code="tokenizer_unavailable",
        )
    check_folder(folder, hub_id)
    return TokenizerSource(hub_id, folder=folder)


def load_from_hub(hub_id: str, load: Callable[[str], Any]) -> Any:
    """``load(hub_id)`` (transformers: the cache, then the network), its failure as one :class:`TokenizerError`."""
    try:
        return load(hub_id)
    except Exception as e:  # transformers raises OSError, ValueError, HF errors...: all mean "cannot load"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TokenizerError(
            f"cannot load tokenizer {hub_id!r} from the hub: {type(e).__name__}: {first}",
            hint="check the hub id (ORG/NAME), and HF_TOKEN for a gated model; or pass a local folder",
            code="tokenizer_unavailable",
        ) from e
