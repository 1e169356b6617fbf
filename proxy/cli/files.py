"""Reading the user's input files, with one-line errors the commands print and exit 2 on."""

from __future__ import annotations

from pathlib import Path

from cachewarden.proxy.engine.errors import RequestError


def read_text(path: str | Path) -> str:
    """The whole file as UTF-8 text, or a RequestError that names the file and the problem."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RequestError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RequestError(f"{path}: is a directory") from None
    except UnicodeDecodeError as exc:
        raise RequestError(f"{path}: not valid UTF-8 (byte offset {exc.start})") from None
    except OSError as exc:
        raise RequestError(f"{path}: cannot read ({exc.strerror})") from None
