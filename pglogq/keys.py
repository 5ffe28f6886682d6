"""Event keys and partitions: which partition of a queue an event with a given key goes to.

A queue made with ``create_queue(queue, partitions=N)`` puts every event sent with ``key=K``
into partition ``key_slot(K) % N``, so all the events of one key are read in send order by one
worker of each consumer at a time.  The rule is the server's (``pglogq.key_slot``); these
functions compute it in Python without asking the server (no I/O here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pglogq.errors import InvalidKey, InvalidPartitions

SLOTS = 16384
"""The number of hash slots a key maps to (``key_slot`` is within ``0..SLOTS - 1``)."""

MAX_PARTITIONS = 1024
"""The largest partition count of a queue (``create_queue``)."""

MAX_KEY_BYTES = 255
"""The longest event key, in UTF-8 bytes."""


def key_slot(key: str) -> int:
    """The hash slot of ``key``, within 0..16383: the first 4 bytes of the MD5 digest of the key's
    UTF-8 bytes, read as an unsigned big-endian number, modulo 16384.

    The same number as SQL ``pglogq.key_slot(key)`` in a UTF-8 database, on every platform and
    PostgreSQL version.  Any str is hashed (also one that ``send`` would refuse as a key, such as
    ``""``); a str that is not Unicode text (a lone surrogate) raises :class:`InvalidKey`, as
    does anything else than a str."""
    if not isinstance(key, str):
        raise InvalidKey(f"invalid key: a str is expected, got {type(key).__name__}")
    try:
        data = key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"invalid key: {exc}") from None
    return int.from_bytes(hashlib.md5(data).digest()[:4], "big") % SLOTS


def key_partition(key: str, partitions: int) -> int:
    """The partition, within ``0..partitions - 1``, that an event sent with ``key`` goes to in a
    queue of ``partitions`` partitions: ``key_slot(key) % partitions``.

    ``partitions`` must be an int within 1..1024 (else :class:`InvalidPartitions`); ``key`` as
    for :func:`key_slot`."""
    return key_slot(key) % check_partitions(partitions)


def check_partitions(partitions: Any) -> int:
    """``partitions`` when it is a partition count ``create_queue`` takes (an int, not a bool,
    within 1..1024); otherwise :class:`InvalidPartitions`."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitions(f"invalid partition count {partitions!r}: an int within 1..{MAX_PARTITIONS} "
                                "is expected")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitions(f"invalid partition count {partitions}: use 1..{MAX_PARTITIONS}")
    return partitions


def check_key(key: Any, where: str = "") -> str:
    """``key`` when ``send`` takes it as an event key: a str of 1 to 255 UTF-8 bytes with no NUL
    character; otherwise :class:`InvalidKey` (``where``: e.g. " at position 3", for the message)."""
    if not isinstance(key, str):
        what = "None (leave keys None for events without a key)" if key is None else type(key).__name__
        raise InvalidKey(f"invalid key{where}: a str is expected, got {what}")
    if "\x00" in key:
        raise InvalidKey(f"invalid key{where}: contains a NUL character, which PostgreSQL text cannot hold")
    try:
        size = len(key.encode("utf-8")) if not key.isascii() else len(key)
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"invalid key{where}: {exc}") from None
    if not 1 <= size <= MAX_KEY_BYTES:
        raise InvalidKey(f"invalid key{where}: {size} bytes (a key is 1 to {MAX_KEY_BYTES} bytes)")
    return key


def check_keys(keys: Any, count: int) -> list[str]:
    """``keys`` as a list when ``send_batch`` takes it for ``count`` payloads: a sequence (not a
    str) of ``count`` valid keys (:func:`check_key`); otherwise :class:`InvalidKey`."""
    if isinstance(keys, (str, bytes, bytearray, memoryview, Mapping)):
        what = "a single str" if isinstance(keys, str) else type(keys).__name__
        raise InvalidKey(f"keys must be a sequence of keys (one per payload), not {what}")
    try:
        out = list(keys)
    except TypeError:
        raise InvalidKey(f"keys must be a sequence of keys (one per payload), not {type(keys).__name__}") from None
    if len(out) != count:
        raise InvalidKey(f"keys has {len(out)} elements, payloads has {count}")
    for i, key in enumerate(out):
        check_key(key, f" at position {i + 1}")
    return out
