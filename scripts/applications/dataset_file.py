"""The linattn dataset file (docs/datasets.md), written from numpy arrays.

A file holds the train, validation and test splits of fixed-length token sequences for classification
(images as 8-bit pixel tokens, speech as 8-bit mu-law samples), with the vocabulary size, the class names,
the task's name, the format version and a CRC-32 (zlib's) over everything before it. `linattn train --task
image|speech --data FILE` reads it.

    from dataset_file import write_dataset
    write_dataset("digits.ds", "image", {"train": (x_train, y_train), "validation": (x_val, y_val),
                                          "test": (x_test, y_test)}, vocab=256, class_names=["0", ..., "9"])
"""
from __future__ import annotations

import os
import re
import struct
import tempfile
import zlib

import numpy as np

MAGIC = b"LATNDSET"
VERSION = 1
SPLITS = ("train", "validation", "test")
MAX_VOCAB = 65536
MAX_CLASSES = 65536
MAX_SEQ_LEN = 1 << 20
MAX_TASK_NAME = 64
MAX_CLASS_NAME = 256


def _text(value: str) -> bytes:
    raw = value.encode("ascii")
    return struct.pack("<q", len(raw)) + raw


def _check_names(task: str, class_names) -> None:
    if not isinstance(task, str) or not re.fullmatch(r"[a-z0-9_-]{1,%d}" % MAX_TASK_NAME, task):
        raise ValueError(f"task is {task!r}, expected 1 to {MAX_TASK_NAME} characters of [a-z0-9_-]")
    if not 2 <= len(class_names) <= MAX_CLASSES:
        raise ValueError(f"class_names has {len(class_names)} names, expected 2 to {MAX_CLASSES}")
    for i, name in enumerate(class_names):
        if not isinstance(name, str) or not re.fullmatch(r"[\x20-\x7e]{1,%d}" % MAX_CLASS_NAME, name):
            raise ValueError(f"class_names[{i}] is {name!r}, expected 1 to {MAX_CLASS_NAME} printable ASCII characters")


def _split_arrays(name: str, split, vocab: int, classes: int, seq_len: int | None):
    if not isinstance(split, (tuple, list)) or len(split) != 2:
        raise ValueError(f"splits[{name!r}] is not a pair (tokens, labels)")
    tokens, labels = np.asarray(split[0]), np.asarray(split[1])
    if tokens.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"splits[{name!r}] tokens have dtype {tokens.dtype}, expected uint8 or uint16")
    if tokens.ndim != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 1:
        raise ValueError(f"splits[{name!r}] tokens have shape {tokens.shape}, expected [n >= 1, L >= 1]")
    if seq_len is not None and tokens.shape[1] != seq_len:
        raise ValueError(f"splits[{name!r}] tokens have length {tokens.shape[1]}, expected {seq_len} "
                         "(every split's sequences have one length)")
    if tokens.shape[1] > MAX_SEQ_LEN:
        raise ValueError(f"splits[{name!r}] sequences have {tokens.shape[1]} tokens, expected at most {MAX_SEQ_LEN}")
    if labels.ndim != 1 or labels.shape[0] != tokens.shape[0] or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"splits[{name!r}] labels have shape {labels.shape} and dtype {labels.dtype}, "
                         f"expected integers of shape [{tokens.shape[0]}]")
    if tokens.size and int(tokens.max()) >= vocab:
        raise ValueError(f"splits[{name!r}] holds token {int(tokens.max())}, expected < vocab {vocab}")
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        raise ValueError(f"splits[{name!r}] holds labels {int(labels.min())}..{int(labels.max())}, "
                         f"expected 0 to {classes - 1} (one per class name)")
    return tokens, labels


def dataset_bytes(task: str, splits: dict, vocab: int, class_names) -> bytes:
    """The file's bytes (docs/datasets.md); raises ValueError naming the first bad argument."""
    class_names = list(class_names)
    _check_names(task, class_names)
    if not isinstance(vocab, int) or not 2 <= vocab <= MAX_VOCAB:
        raise ValueError(f"vocab is {vocab!r}, expected an integer from 2 to {MAX_VOCAB}")
    if not isinstance(splits, dict) or set(splits) != set(SPLITS):
        raise ValueError(f"splits has keys {sorted(splits) if isinstance(splits, dict) else splits!r}, "
                         f"expected exactly {list(SPLITS)}")
    width = 1 if vocab <= 256 else 2
    arrays, seq_len = [], None
    for name in SPLITS:
        tokens, labels = _split_arrays(name, splits[name], vocab, len(class_names), seq_len)
        seq_len = tokens.shape[1]
        arrays.append((tokens, labels))
    parts = [MAGIC, struct.pack("<IIqqq", VERSION, width, seq_len, vocab, len(class_names)), _text(task)]
    parts += [_text(name) for name in class_names]
    for tokens, labels in arrays:
        parts.append(struct.pack("<q", tokens.shape[0]))
        parts.append(np.ascontiguousarray(tokens, dtype="<u1" if width == 1 else "<u2").tobytes())
        parts.append(np.ascontiguousarray(labels, dtype="<u4").tobytes())
    body = b"".join(parts)
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def write_dataset(path, task: str, splits: dict, vocab: int, class_names) -> int:
    """Writes the dataset file atomically (a temporary beside path, renamed over it); returns its CRC-32.

    splits: {"train": (tokens, labels), "validation": ..., "test": ...}, tokens uint8 or uint16 [n, L]
    (one L for all three), labels integers [n] in [0, len(class_names)).
    """
    data = dataset_bytes(task, splits, vocab, class_names)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would make the file private, unlike open()'s
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return struct.unpack("<I", data[-4:])[0]
