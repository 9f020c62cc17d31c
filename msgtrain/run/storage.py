"""Inputs, parts and OUT on object storage (``s3://``, ``gs://``, ``az://``, ``hf://``, ...) through fsspec.

A location is either a local path (handled by the pipeline's own filesystem code, unchanged) or a URL with a
protocol; ``file://`` URLs are local paths. :class:`Store` is the small surface the pipeline needs from a store.

Invariants:
- Nothing here relies on rename: object stores have none. Every object is written with one PUT (atomic per
  object on S3, GCS and Azure Blob), and a set of objects is made visible by writing one small object *last*:
  a part by its ``part.json``, a dataset by the ``_latest`` pointer (:func:`publish_pointer`).
- A content hash comes from the store's own metadata when that metadata *is* a hash of the content (S3's ETag of
  a single-part upload is the MD5 of the bytes, GCS ``md5Hash``, Azure ``content_md5``, the Hub's LFS sha256 or
  git blob id), else from reading the object. Two objects with the same hash have the same bytes, so
  ``--resume`` never reuses a part of different content.
- A missing protocol package is a :class:`~msgtrain.errors.ConfigError` naming the extra to install.
- Credentials and endpoints come from the protocol's usual environment (``AWS_*``, including
  ``AWS_ENDPOINT_URL`` for S3-compatible servers; ``GOOGLE_APPLICATION_CREDENTIALS``; ``AZURE_STORAGE_*``;
  ``HF_TOKEN``), so driver and workers are configured the same way.

Layout of a dataset published to a URL ``OUT``::

    OUT/_versions/<version>/...   one complete dataset per run (data/, dataset_info.json, report.json, rejects)
    OUT/_latest                   JSON {"version": ..., "path": ...}, written last: the current dataset

A reader reads ``OUT/_latest`` and opens the prefix it names (:func:`current_version`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Literal, TypeVar

from msgtrain.errors import ConfigError, MsgtrainError, OutputError
from msgtrain.ingest.core.files import HEAD_BYTES, BytesSibling, LocalFiles, SharedIndex, index_key, reading_through

T = TypeVar("T")
URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
POINTER = "_latest"
VERSIONS = "_versions"
# The package each protocol needs, and the msgtrain extra that installs it.
PROTOCOL_PACKAGES: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
    "hf": ("huggingface_hub", "hf"),
}


def protocol(location: str | os.PathLike[str]) -> str | None:
    """The URL's protocol, or None for a local path (``file://`` included)."""
    m = URL.match(str(location))
    if m is None or m.group(1).lower() in ("file", "local"):
        return None
    return m.group(1).lower()


def is_remote(location: str | os.PathLike[str] | None) -> bool:
    return location is not None and protocol(location) is not None


def normalize_location(value: str) -> str | Path:
    """A URL stays a string (``Path`` would fold ``s3://b`` into ``s3:/b``), without a trailing slash; a local path
    becomes a Path."""
    return value.rstrip("/") if is_remote(value) else local_path(value)


def child(location: Path | str, name: str) -> Path | str:
    """The location ``name`` (a relative path) inside the directory or prefix ``location``."""
    return join(location, name) if isinstance(location, str) else location / name


def first_line(location: Path | str) -> str | None:
    """The first line of a file or object, or None when it is absent or unreadable."""
    try:
        if isinstance(location, str):
            store = Store.of(location)
            return (
                store.read_bytes(location).decode("utf-8", "replace").split("\n", 1)[0]
                if store.exists(location)
                else None
            )
        with open(location, encoding="utf-8") as f:
            return f.readline()
    except (OSError, ValueError):
        return None


def read_if_present(location: Path | str) -> bytes | None:
    """A file's or an object's bytes, or None when it is absent. Raises OSError when it is there but unreadable."""
    if isinstance(location, str):
        store = Store.of(location)
        return store.read_bytes(location) if store.exists(location) else None
    return location.read_bytes() if location.is_file() else None


def read_location(location: Path | str) -> bytes:
    """A file's or an object's bytes. Raises OSError (FileNotFoundError when absent)."""
    return Store.of(location).read_bytes(location) if isinstance(location, str) else location.read_bytes()


def put_file(src: Path, location: Path | str) -> None:
    """Move the local file ``src`` to ``location`` (its folder made), or upload it there."""
    if isinstance(location, str):
        Store.of(location).upload(src, location)
        return
    location.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src, location)


def replace_whole(location: Path | str, data: bytes) -> None:
    """Write a file or an object so that a reader sees the previous bytes or these, never a part: one rename of a
    written temporary file locally, one PUT on a store."""
    if isinstance(location, str):
        Store.of(location).put_bytes(location, data)
        return
    location.parent.mkdir(parents=True, exist_ok=True)
    tmp = location.with_name(f".{location.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, location)


def append_if_possible(location: Path | str, data: bytes) -> bool:
    """Append to a local file (made if absent) and return True; an object store has no append: False, nothing
    written (the caller writes the whole instead)."""
    if isinstance(location, str):
        return False
    location.parent.mkdir(parents=True, exist_ok=True)
    with open(location, "ab") as f:
        f.write(data)
    return True


def remove_file(location: Path | str) -> None:
    """Remove a file or an object; absent is fine."""
    if isinstance(location, str):
        Store.of(location).remove(location)
    else:
        location.unlink(missing_ok=True)


@contextlib.contextmanager
def writable_dir(dest: Path | str, last: tuple[str, ...] = ()) -> Iterator[Path]:
    """A local directory whose files end up at ``dest``: ``dest`` itself when local; else a scratch directory
    uploaded when the body succeeds, the files named in ``last`` after all others (their presence means the rest
    is there)."""
    if not isinstance(dest, str):
        dest.mkdir(parents=True, exist_ok=True)
        yield dest
        return
    with tempfile.TemporaryDirectory(prefix="msgtrain-upload-") as scratch:
        yield Path(scratch)
        Store.of(dest).upload_tree(Path(scratch), dest, last=last)


def local_path(location: str | os.PathLike[str]) -> Path:
    """A local location as a Path (``file:///x`` → ``/x``)."""
    text = str(location)
    return Path(text[len("file://") :]) if text.startswith("file://") else Path(text)


def join(url: str, *names: str) -> str:
    return "/".join([url.rstrip("/"), *(n.strip("/") for n in names)])


class StoreConnectionError(OutputError):
    """The object store's endpoint cannot be reached (refused, unknown host, timed out): not a bug, not missing
    data. The message names the endpoint and the URL being accessed."""

    code = "store_unreachable"


class StoreAccessError(OutputError):
    """The object store refused this process (no credentials, wrong or expired ones, access denied) or the bucket
    does not exist: the message names the URL and what to set."""

    code = "store_access"


# Each store package's own "no credentials / refused" exceptions, by module (only imported modules are looked at).
_CREDENTIAL_ERRORS = {
    "botocore.exceptions": ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"),
    "google.auth.exceptions": ("DefaultCredentialsError", "RefreshError"),
    "azure.core.exceptions": ("ClientAuthenticationError",),
}
CREDENTIAL_VARIABLES = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    "s3a": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS",
    "gcs": "GOOGLE_APPLICATION_CREDENTIALS",
    "az": "AZURE_STORAGE_CONNECTION_STRING",
    "abfs": "AZURE_STORAGE_CONNECTION_STRING",
    "abfss": "AZURE_STORAGE_CONNECTION_STRING",
    "hf": "HF_TOKEN",
}


def _credential_problem(error: BaseException) -> str | None:
    """What is wrong with this process's credentials, when ``error`` (or what caused it) says so; else None."""
    types: list[type] = []
    for module, names in _CREDENTIAL_ERRORS.items():
        loaded = sys.modules.get(module)
        types += [t for t in (getattr(loaded, n, None) for n in names) if isinstance(t, type)]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and not isinstance(current, MsgtrainError):
        if types and isinstance(current, tuple(types)):
            return "no usable credentials"
        if isinstance(current, PermissionError):
            return "access denied"
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def credentials_hint(proto: str) -> str:
    """How to give a run credentials for ``proto``, on this machine and under ``ray job submit``."""
    variables = CREDENTIAL_VARIABLES.get(proto, "the store's credential variables")
    return (
        f"set {variables} for a principal allowed to read and write there; under `ray job submit`, pass them in "
        "the runtime env (--runtime-env-json '{\"env_vars\": {...}}'), or give the cluster's nodes a role"
    )


# Each store package's own "could not connect" exceptions, by module: only a module already imported can have
# raised one, so none is imported here.
_CONNECTION_ERRORS = {
    "botocore.exceptions": ("ConnectionError", "HTTPClientError"),
    "aiohttp.client_exceptions": ("ClientConnectionError", "ServerTimeoutError"),
    "azure.core.exceptions": ("ServiceRequestError",),
    "requests.exceptions": ("ConnectionError", "Timeout"),
    "httpx": ("ConnectError", "TimeoutException"),
}


def _is_connection_error(error: BaseException) -> bool:
    types: list[type] = [ConnectionError, TimeoutError]
    for module, names in _CONNECTION_ERRORS.items():
        loaded = sys.modules.get(module)
        types += [t for t in (getattr(loaded, n, None) for n in names) if isinstance(t, type)]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and not isinstance(current, MsgtrainError):
        if isinstance(current, tuple(types)):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _naming_connection_errors(cls: type[Store]) -> type[Store]:
    """Every public method of ``cls`` raises :class:`StoreConnectionError` (naming the endpoint) where the store
    package raised its own connection error, which the command line would otherwise report as a bug."""

    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def call(self: Store, *args: Any, **kwargs: Any) -> Any:
            url = next((a for a in args if isinstance(a, str) and protocol(a)), f"{self.protocol}://")
            with self.connection_errors(url):
                return method(self, *args, **kwargs)

        return call

    for name, value in list(vars(cls).items()):
        if callable(value) and not name.startswith("_") and name not in ("endpoint", "url", "connection_errors"):
            setattr(cls, name, wrap(value))
    return cls


ENDPOINT_VARIABLES = {
    "s3": "AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3, AWS_REGION",
    "s3a": "AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3, AWS_REGION",
    "gs": "STORAGE_EMULATOR_HOST, GOOGLE_APPLICATION_CREDENTIALS",
    "gcs": "STORAGE_EMULATOR_HOST, GOOGLE_APPLICATION_CREDENTIALS",
    "az": "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME",
    "abfs": "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME",
    "abfss": "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME",
    "hf": "HF_ENDPOINT, HF_TOKEN",
}


@_naming_connection_errors
class Store:
    """One object store (one protocol), addressed with full URLs."""

    def endpoint(self) -> str:
        """The endpoint this store talks to, as configured (for error messages)."""
        fs = self.fs
        for value in (
            getattr(fs, "endpoint_url", None),
            (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url"),
            os.environ.get("AWS_ENDPOINT_URL_S3") if self.protocol in ("s3", "s3a") else None,
            os.environ.get("AWS_ENDPOINT_URL") if self.protocol in ("s3", "s3a") else None,
            os.environ.get("STORAGE_EMULATOR_HOST") if self.protocol in ("gs", "gcs") else None,
            getattr(fs, "account_url", None),
            os.environ.get("HF_ENDPOINT") if self.protocol == "hf" else None,
        ):
            if isinstance(value, str) and value:
                return value
        return f"the default {self.protocol}:// endpoint"

    @contextlib.contextmanager
    def connection_errors(self, url: str) -> Iterator[None]:
        """Turn the store package's own connection errors raised in the body into :class:`StoreConnectionError`
        (every public method does this; code calling ``self.fs`` directly wraps itself in it)."""
        try:
            yield
        except Exception as e:
            problem = None if isinstance(e, MsgtrainError) else _credential_problem(e)
            if problem is not None:
                raise StoreAccessError(
                    f"the {self.protocol}:// store at {self.endpoint()} refused this process: {problem}"
                    f" ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'})",
                    where=url,
                    hint=credentials_hint(self.protocol),
                ) from None
            if not _is_connection_error(e):
                raise
            raise StoreConnectionError(
                f"cannot connect to the {self.protocol}:// store at {self.endpoint()}"
                f" ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no answer'})",
                where=url,
                hint="check that the endpoint is up and reachable from here, and its variables"
                f" ({ENDPOINT_VARIABLES.get(self.protocol, 'the protocol environment')})",
            ) from None

    def __init__(self, url: str) -> None:
        proto = protocol(url)
        if proto is None:
            raise ValueError(f"{url!r} is not a URL")
        import fsspec

        try:
            self.fs: Any = fsspec.filesystem(proto)
        except ImportError as e:
            package, extra = PROTOCOL_PACKAGES.get(proto, (proto, proto))
            raise ConfigError(
                f"{url}: reading {proto}:// needs the {package} package, which is not installed ({e})",
                hint=f"pip install 'msgtrain[{extra}]'",
            ) from None
        except ValueError as e:  # fsspec: "Protocol not known"
            raise ConfigError(
                f"{url}: unknown storage protocol {proto!r}",
                hint=f"use a local path or one of: {', '.join(sorted(PROTOCOL_PACKAGES))}",
            ) from e
        self.protocol = proto

    @classmethod
    def of(cls, url: str) -> Store:
        return cls(url)

    def _path(self, url: str) -> str:
        return str(self.fs._strip_protocol(url))

    def url(self, path: str) -> str:
        return f"{self.protocol}://{path}"

    # ------------------------------------------------------------------------------------------------ reading
    def list_files(self, prefix: str) -> list[tuple[str, int]]:
        """Every object under ``prefix`` (recursively) as (url, size), sorted; a URL naming one object gives it."""
        return sorted((url, int(info.get("size") or 0)) for url, info in self._listing(prefix).items())

    def listed_hashes(self, prefix: str) -> dict[str, str | None]:
        """The content hash of every object under ``prefix`` as one listing shows it (:func:`_metadata_hash`; None
        where it shows none). A listing may lack what tells an MD5 from another ETag (S3 lists no encryption):
        confirm a hash that disagrees with :meth:`metadata_hash` before acting on it."""
        return {url: _metadata_hash(self.protocol, info) for url, info in self._listing(prefix).items()}

    def _listing(self, prefix: str) -> dict[str, dict[str, Any]]:
        path = self._path(prefix)
        self._fresh(path)
        try:
            found = self.fs.find(path, detail=True)
            if not found and self.fs.isfile(path):
                found = {path: self.fs.info(path)}
        except FileNotFoundError:
            found = {}
        return {self.url(p): info for p, info in found.items() if info["type"] == "file"}

    def exists(self, url: str) -> bool:
        path = self._path(url)
        self._fresh(path)
        return bool(self.fs.exists(path))

    def _fresh(self, path: str) -> None:
        # Other processes (workers, a previous run) write here: a listing cached by this process may be stale.
        self.fs.invalidate_cache(path)

    def read_bytes(self, url: str) -> bytes:
        return bytes(self.fs.cat_file(self._path(url)))

    def download(self, url: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(self._path(url), str(dest))

    def size(self, url: str) -> int:
        return int(self.fs.size(self._path(url)) or 0)

    def folder_files(self, url: str) -> list[str]:
        """The objects directly under the prefix ``url`` (one listing, not a walk), sorted."""
        path = self._path(url)
        self._fresh(path)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return sorted(self.url(e["name"]) for e in entries if e.get("type") == "file")

    def head(self, url: str, size: int) -> bytes:
        """The object's first ``size`` bytes (one ranged read), ``b""`` when it is absent."""
        try:
            return bytes(self.fs.cat_file(self._path(url), start=0, end=size))
        except FileNotFoundError:
            return b""

    def is_dir(self, url: str) -> bool:
        """Whether ``url`` is a prefix (a "folder" of objects), not one object."""
        path = self._path(url)
        self._fresh(path)
        return bool(self.fs.isdir(path))

    def download_tree(self, url: str, dest: Path) -> None:
        """Copy every object under the prefix ``url`` to the directory ``dest`` (same relative names)."""
        prefix = url.rstrip("/")
        for member, _ in self.list_files(prefix):
            self.download(member, dest.joinpath(*member[len(prefix) + 1 :].split("/")))

    def tree_hash(self, url: str) -> str:
        """A hash of a prefix's objects: their relative names and content hashes, sorted (a folder log's digest)."""
        prefix = url.rstrip("/")
        h = hashlib.blake2b(digest_size=16)
        for member, _ in self.list_files(prefix):
            h.update(member[len(prefix) + 1 :].encode("utf-8", "surrogatepass") + b"\0")
            h.update(self.content_hash(member).encode() + b"\0")
        return "tree:" + h.hexdigest()

    def metadata_hash(self, url: str) -> str | None:
        """The content hash the store keeps for the object (an MD5, a sha256...: :func:`_metadata_hash`), read from
        its metadata without reading the object; None when the store keeps none. Raises FileNotFoundError when the
        object is absent."""
        path = self._path(url)
        self._fresh(path)
        return _metadata_hash(self.protocol, self.fs.info(path))

    def content_hash(self, url: str) -> str:
        """A hash of the object's bytes: from the store's metadata when it is one, else read (blake2b)."""
        path = self._path(url)
        info = self.fs.info(path)
        if info.get("type") == "directory":  # a folder log (a directory reader's unit)
            return self.tree_hash(url)
        known = _metadata_hash(self.protocol, info)
        if known is not None:
            return known
        h = hashlib.blake2b(digest_size=16)
        with self.fs.open(path, "rb", block_size=1 << 22) as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return h.hexdigest()

    # ------------------------------------------------------------------------------------------------ writing
    def put_bytes(self, url: str, data: bytes) -> None:
        """One PUT: the object is absent, or complete (the store's per-object atomicity)."""
        self.fs.pipe_file(self._path(url), data)

    def upload(self, src: Path, url: str) -> None:
        self.fs.put_file(str(src), self._path(url))

    def upload_tree(self, root: Path, url: str, last: tuple[str, ...] = ()) -> None:
        """Upload every file under ``root`` to ``url``; the files named in ``last`` (relative paths) after all
        others, so their presence means the rest is there."""
        files = sorted(p for p in root.rglob("*") if p.is_file())
        late = [p for p in files if str(p.relative_to(root)) in last]
        for p in [*(p for p in files if p not in late), *late]:
            self.upload(p, join(url, *p.relative_to(root).parts))

    def remove(self, url: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(url), recursive=True)

    def children(self, url: str) -> list[str]:
        """Names directly under a prefix (objects and sub-prefixes)."""
        path = self._path(url)
        self._fresh(path)
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []


# ------------------------------------------------------------------------------------------------------ discovery
LOG_SUFFIXES = (".jsonl", ".json", ".yaml", ".yml", ".traj", ".ndjson", ".eval")
NOT_A_LOG = "not a log file suffix"
HIDDEN_DIRECTORY = "hidden directory, not searched"
Found = tuple[list[Path | str], list[dict[str, str]]]  # (inputs, what was passed over with its reason)


def discover(item: str, local: Callable[[str], tuple[list[Path], list[dict[str, str]]]]) -> Found:
    """The inputs one location names: a local path through ``local`` (the file-system walk); a URL by listing its
    objects, which are then judged as the local walk judges files (:func:`discover_objects`)."""
    if is_remote(item):
        return discover_objects(item)
    files, ignored = local(item)
    return list(files), ignored


def discover_objects(item: str) -> Found:
    """An object, or every object under a prefix, sorted; hidden names and names without a log suffix listed as
    passed over, and a folder a directory reader takes as one log one input."""
    ignored: list[dict[str, str]] = []
    found = Store.of(item).list_files(item)
    if not found:
        raise ConfigError(f"input {item!r} names no object", hint="check the bucket and prefix")
    # A folder a directory reader takes as one log is one input, as locally; its objects are not inputs.
    units = unit_prefixes(item, [url for url, _ in found])
    hidden_seen: set[str] = set()
    inside = set(units)
    mine: list[str] = list(units)
    for url, _ in found:
        parents = url.split("/")
        if any("/".join(parents[:k]) in inside for k in range(len(parents) - 1, 3, -1)):
            continue
        rel = url[len(item.rstrip("/")) :].strip("/").split("/")
        hidden = next((k for k, part in enumerate(rel[:-1]) if part.startswith(".")), None)
        if hidden is not None:  # the hidden folder is listed once, as a local walk lists it
            folder = item.rstrip("/") + "/" + "/".join(rel[: hidden + 1])
            if folder not in hidden_seen:
                hidden_seen.add(folder)
                ignored.append({"path": folder, "reason": HIDDEN_DIRECTORY})
            continue
        name = url.rpartition("/")[2]
        suffix = "." + name.rpartition(".")[2].lower() if "." in name else ""
        if suffix in LOG_SUFFIXES or url == item.rstrip("/") or _object_looks_like_a_log(url):
            mine.append(url)
        else:
            ignored.append({"path": url, "reason": _passed_over_reason(name)})
    return sorted(mine), ignored


def _passed_over_reason(name: str) -> str:
    from msgtrain.ingest.detect import passed_over_reason  # as the local walk says it

    return passed_over_reason(name, NOT_A_LOG)


def _object_looks_like_a_log(url: str) -> bool:
    """:func:`~msgtrain.ingest.detect.looks_like_a_log` of an object without a log suffix, judged on a copy under its
    own name, as the local walk judges the same file (a Letta ``.af``, an AG2 ``logs.db``): a bucket and a disk
    holding the same files give the same inputs."""
    from msgtrain.ingest.detect import looks_like_a_log

    store = Store.of(url)
    with tempfile.TemporaryDirectory(prefix="msgtrain-sniff-") as tmp:
        local = Path(tmp) / url.rpartition("/")[2]
        try:
            store.download(url, local)
        except OSError:
            return False  # unreadable: passed over, as an unreadable local file is
        return looks_like_a_log(local)


def unit_prefixes(prefix: str, urls: list[str]) -> list[str]:
    """The prefixes under ``prefix`` that a directory reader takes as one log (e.g. an OpenHands V1 conversation
    folder), found as local discovery finds them: the reader's own ``detect_directory`` hook, asked about a
    skeleton of the listing (one empty file per object, in a temporary directory). Sorted; none nested."""
    from msgtrain.ingest.registry import unit_directories

    root = prefix.rstrip("/")
    rels = [u[len(root) + 1 :] for u in urls if u.startswith(root + "/")]
    if not any("/" in rel for rel in rels):  # no sub-prefix: nothing can be a folder log
        return []
    with tempfile.TemporaryDirectory(prefix="msgtrain-listing-") as tmp:
        skeleton = Path(tmp) / "root"
        skeleton.mkdir()
        for rel in rels:
            path = skeleton.joinpath(*rel.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        units = unit_directories(skeleton)
        return sorted(join(root, *unit.relative_to(skeleton).parts) for unit in units if unit != skeleton)


def _metadata_hash(proto: str, info: dict[str, Any]) -> str | None:
    """The content hash a store keeps for an object, when it has one."""
    if proto in ("s3", "s3a"):
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
        # A multipart upload's ETag is a hash of part hashes ("…-N") and SSE-KMS ETags are not MD5s; only a
        # plain 32-hex ETag of an unencrypted or SSE-S3 object is the MD5 of the bytes.
        if re.fullmatch(r"[0-9a-f]{32}", etag) and info.get("ServerSideEncryption") in (None, "AES256"):
            return f"md5:{etag}"
        return None
    if proto in ("gs", "gcs"):
        md5 = info.get("md5Hash")  # absent for composite objects
        return f"md5:{base64.b64decode(md5).hex()}" if md5 else None
    if proto in ("az", "abfs", "abfss"):
        settings = info.get("content_settings") or {}
        md5 = settings.get("content_md5") if isinstance(settings, dict) else getattr(settings, "content_md5", None)
        return f"md5:{bytes(md5).hex()}" if md5 else None
    if proto == "hf":
        lfs = info.get("lfs") or {}
        if lfs.get("sha256"):
            return f"sha256:{lfs['sha256']}"
        return f"gitblob:{info['blob_id']}" if info.get("blob_id") else None
    return None


# ---------------------------------------------------------------------------------------------------- datasets
def new_version() -> str:
    """A fresh version name: UTC time (so names sort by age) and random bits (two runs never share one)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def version_url(out: str, version: str) -> str:
    return join(out, VERSIONS, version)


def current_version(out: str) -> str | None:
    """The version ``OUT/_latest`` names (None before the first publish): what a reader should open."""
    store = Store.of(out)
    pointer = join(out, POINTER)
    if not store.exists(pointer):
        return None
    data = json.loads(store.read_bytes(pointer))
    return str(data["version"])


def publish_pointer(out: str, version: str, keep: int = 2) -> None:
    """Make ``version`` the current dataset of ``out`` (one PUT of ``OUT/_latest``), then delete old versions.

    The previous version is kept (``keep=2``: the new one and the one before it) because a reader that read the
    pointer just before this call may still be reading it; older versions, and versions of runs that never
    published (killed after uploading), are removed.
    """
    store = Store.of(out)
    target = version_url(out, version)
    if not store.exists(join(target, "report.json")):
        raise OutputError(f"cannot publish {target}: it has no report.json", hint="the upload did not finish")
    previous = current_version(out)
    store.put_bytes(join(out, POINTER), _pointer_bytes(version, target))
    keep_names = {version, previous} if keep >= 2 else {version}
    for name in store.children(join(out, VERSIONS)):
        if name not in keep_names:
            store.remove(version_url(out, name))


def _pointer_bytes(version: str, target: str) -> bytes:
    return (
        json.dumps({"format": "msgtrain.latest", "version": version, "path": target}, sort_keys=True) + "\n"
    ).encode()


def file_digest(path: Path) -> str:
    """A hash of a file's bytes; for a directory log, of every file in it (relative names and bytes, sorted)."""
    h = hashlib.blake2b(digest_size=16)
    members = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for member in members:
        if member is not path:
            h.update(str(member.relative_to(path)).encode("utf-8", "surrogatepass") + b"\0")
        with open(member, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------- locations for readers
def input_size(location: Path | str) -> int:
    """An input's size in bytes (a folder log's files together), 0 when it cannot be told. An object's comes from
    the listing that discovered it (fsspec keeps it) or its metadata, never from reading it."""
    try:
        if isinstance(location, str):
            return Store.of(location).size(location)
        if location.is_dir():
            return sum(p.stat().st_size for p in location.rglob("*") if p.is_file())
        return location.stat().st_size
    except OSError:
        return 0


Stamp = tuple[tuple[str, int, int, int, int], ...]


def input_stamp(location: Path | str) -> Stamp | None:
    """What changes whenever a local input's bytes change: each file's inode, size, modification and change times
    (a folder log's files, by name, sorted); the change time is set by the kernel on every write and cannot be set
    back, so an in-place rewrite that restores the modification time still changes it. None for an object on a store
    (an object is replaced whole, never rewritten in place) or when it cannot be told."""
    if isinstance(location, str):
        return None
    try:
        members = sorted(p for p in location.rglob("*") if p.is_file()) if location.is_dir() else [location]
        stamps = []
        for member in members:
            st = member.stat()
            name = str(member.relative_to(location)) if member is not location else ""
            stamps.append((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    except OSError:
        return None
    return tuple(stamps)


def content_digest(location: Path | str) -> str:
    """A hash of an input's bytes: a local file's (a folder log's files), or an object's from its store
    (:meth:`Store.content_hash`). Raises OSError when it cannot be read."""
    return Store.of(location).content_hash(location) if isinstance(location, str) else file_digest(location)


def reader_location(location: Path | str) -> PurePosixPath:
    """Where a reader sees an input (:mod:`msgtrain.ingest.core.files`): a local path as it is, an object by its
    bucket and key (``s3://b/k`` → ``/b/k``)."""
    return location_of(location) if isinstance(location, str) else PurePosixPath(location.as_posix())


def cut_by(location: Path | str, chunk_bytes: int) -> Literal["disk", "store", "whole"]:
    """Where a huge input can be cut into chunks of whole conversations, by where it lies: ``disk`` (a local file: a
    pass over it decides whether its reader can cut it), ``store`` (an object above ``chunk_bytes`` with a JSON-lines
    name: a planning task reads it, and each chunk's worker fetches only its byte ranges; whether its reader can cut
    it is decided there, as for a local file) or ``whole`` (any other object: one unit of work)."""
    if not isinstance(location, str):
        return "disk"
    name = location.rpartition("/")[2].lower()
    if chunk_bytes <= 0 or not name.endswith((".jsonl", ".ndjson")):
        return "whole"
    return "store" if Store.of(location).size(location) > chunk_bytes else "whole"


def base_name(location: Path | str) -> str:
    """An input's own name, without its folder or prefix."""
    return location.rstrip("/").rpartition("/")[2] if isinstance(location, str) else location.name


def identity(location: Path | str) -> str:
    """What makes an input the same input across runs (``--keep-missing``): a local file's real path, an object's
    URL."""
    return location if isinstance(location, str) else os.path.realpath(location)


def location_of(url: str) -> PurePosixPath:
    """An object's location as readers see it (:mod:`msgtrain.ingest.core.files`): ``s3://b/k`` → ``/b/k``."""
    return PurePosixPath("/" + url.partition("://")[2].strip("/"))


def url_of(scheme_of: str, location: PurePosixPath) -> str:
    """The URL of a location on the store of ``scheme_of`` (any URL of that store)."""
    return f"{scheme_of.partition('://')[0]}://{str(location).lstrip('/')}"


@contextlib.contextmanager
def readable_input(
    location: Path | str,
    copy_chunk: Callable[[str, Path], None] | None = None,
    shared: SharedIndex | None = None,
    partners: str | None = None,
) -> Iterator[Path]:
    """``location`` as a local path readers open. A local path is itself. An object is copied into a temporary
    directory under its own name (format detection looks at the suffix): a prefix a directory reader takes whole
    (a folder log, named without a suffix) object by object, a chunk of a huge object by ``copy_chunk`` (its byte
    ranges only); while it is open, readers reach the files beside it on the store (:class:`StoreFiles`), as a
    local run reaches them on the disk, and the indexes of its partners (whose content digest is ``partners``) in
    ``shared``. Raises OSError, before yielding, when the copy fails."""
    if not isinstance(location, str):
        with reading_through(LocalFiles(shared, partners)):
            yield location
        return
    with tempfile.TemporaryDirectory(prefix="msgtrain-input-") as tmp:
        local = Path(tmp) / base_name(location)
        store = Store.of(location)
        if "." not in local.name and store.is_dir(location):
            store.download_tree(location, local)
        elif copy_chunk is not None:
            copy_chunk(location, local)
        else:
            store.download(location, local)
        with reading_through(StoreFiles(local, location, shared, partners)):
            yield local


def store_of(location: Path | str) -> str | None:
    """Where a location is, for the functions below: None for the local disk, else its store's root URL."""
    return f"{protocol(location)}://" if isinstance(location, str) else None


def folder_locations(scheme_of: str | None, folder: PurePosixPath) -> list[PurePosixPath]:
    """The files directly in ``folder`` on the local disk (``scheme_of`` None) or on the store of the URL
    ``scheme_of``, sorted (:meth:`msgtrain.ingest.core.files.Beside.listing`)."""
    if scheme_of is None:
        return LocalFiles().listing(folder)
    return [location_of(url) for url in Store.of(scheme_of).folder_files(url_of(scheme_of, folder))]


def head_of(scheme_of: str | None, location: PurePosixPath) -> bytes:
    """The first bytes of the file at ``location`` (:meth:`msgtrain.ingest.core.files.Beside.head`)."""
    if scheme_of is None:
        return LocalFiles().head(location)
    return Store.of(scheme_of).head(url_of(scheme_of, location), HEAD_BYTES)


def location_digest(scheme_of: str | None, location: PurePosixPath) -> str:
    """The content digest of the file at ``location`` on the disk or store of ``scheme_of`` (``absent`` when it
    cannot be read: a reader cannot consult it either)."""
    try:
        if scheme_of is None:
            local = Path(location)
            return file_digest(local) if local.is_file() else "absent"
        url = url_of(scheme_of, location)
        return Store.of(url).content_hash(url)
    except OSError:
        return "absent"


class StoreFiles:
    """The storage interface readers see (:class:`msgtrain.ingest.core.files.InputFiles`) for an object copied to
    ``local``: its location is the object's, and a sibling is read from the store, as a local run reads it from
    the disk beside the input; a kept copy and a partners' index are made once per run in ``shared``."""

    def __init__(self, local: Path, url: str, shared: SharedIndex | None = None, partners: str | None = None):
        self.local, self.url = local, url
        self.shared = shared or SharedIndex.of_process()
        self.partners = partners

    def location(self, path: Path) -> PurePosixPath:
        if path == self.local:
            return location_of(self.url)
        if self.local in path.parents:  # a file of a folder log copied whole
            return location_of(self.url).joinpath(*path.relative_to(self.local).parts)
        return PurePosixPath(path.as_posix())

    def listing(self, folder: PurePosixPath) -> list[PurePosixPath]:
        return folder_locations(self.url, folder)

    def head(self, location: PurePosixPath) -> bytes:
        return head_of(self.url, location)

    def remember(self, key: Hashable, compute: Callable[[], T]) -> T:
        return compute()

    def open_sibling(self, path: Path, sibling: PurePosixPath) -> BinaryIO | None:
        url = url_of(self.url, sibling)
        store = Store.of(url)
        try:
            return BytesSibling(store.read_bytes(url)) if store.exists(url) else None
        except OSError:  # unreadable: as if absent, as a local run treats it
            return None

    @contextlib.contextmanager
    def sibling_copy(self, path: Path, sibling: PurePosixPath) -> Iterator[Path | None]:
        url = url_of(self.url, sibling)
        with tempfile.TemporaryDirectory(prefix="msgtrain-sibling-") as tmp:
            local: Path | None = Path(tmp) / sibling.name
            try:
                Store.of(url).download(url, Path(tmp) / sibling.name)
            except OSError:  # missing or unreadable: as if absent, as a local run treats it
                local = None
            yield local

    @contextlib.contextmanager
    def kept_copy(self, path: Path, sibling: PurePosixPath) -> Iterator[Path | None]:
        url = url_of(self.url, sibling)

        def download(dest: Path) -> None:
            dest.mkdir()
            with contextlib.suppress(OSError):  # missing or unreadable: as if absent, as a local run treats it
                Store.of(url).download(url, dest / sibling.name)

        copied = self.shared.get(index_key("copy", sibling, None), download) / sibling.name
        yield copied if copied.is_file() else None

    @contextlib.contextmanager
    def shared_index(self, path: Path, name: str, build: Callable[[Path], None]) -> Iterator[Path]:
        yield self.shared.get(index_key(name, self.location(path).parent, self.partners), build)
