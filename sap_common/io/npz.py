"""Reading ``.npz`` files with one-line errors: a missing, empty, truncated or otherwise unreadable
file raises ``ValueError`` naming the file, not numpy's ``EOFError`` or zipfile's ``BadZipFile``."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

__all__ = ["read_npz"]


def read_npz(path) -> dict:
    """Every array of the ``.npz`` file at ``path`` as a dict (read in full, the file closed).

    Raises ``ValueError`` ``"<path>: ..."`` when the file does not exist, is empty, is not a
    zip archive (``.npz`` files are), is cut short, or holds an array that cannot be read
    without pickle (object arrays are refused: a data file should not run code)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path}: the file is empty (0 bytes), not an .npz archive")
    if not zipfile.is_zipfile(path):  # an .npz is a zip archive; a cut one has lost its central directory
        raise ValueError(f"{path}: not an .npz archive (no zip directory: truncated, or another kind of file)")
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except ValueError as e:
        text = str(e)
        raise ValueError(text if text.startswith(path) else f"{path}: cannot read an array of it ({text})") from None
    except (EOFError, zipfile.BadZipFile, zlib.error, OSError, KeyError) as e:
        raise ValueError(f"{path}: not a readable .npz file, truncated or damaged ({type(e).__name__}: {e})") from None
