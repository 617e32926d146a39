"""Bucket labels that spread evenly over Spark's shuffle partitions (pure Python, no Spark needed).

Spark places a group of ``groupBy("bucket")`` in shuffle partition ``pmod(murmur3(bucket, seed 42), P)``. For small
integers that hash is far from even: buckets ``0`` and ``1`` both land in partition 1 of 2, so a query with 2
buckets would run on one core. So a key's bucket *index* ``i = pmod(xxhash64(key), B)`` is mapped to a *label*
chosen so that ``pmod(murmur3(label), B) == i``: for every partition count ``P`` that divides ``B``, partition ``p``
then holds exactly the ``B / P`` buckets whose index is ``p`` modulo ``P``. The labels depend on ``B`` alone.
"""

from __future__ import annotations

import functools
from typing import Final

__all__ = ["bucket_labels", "spark_hash_int"]

_MASK: Final = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an ``int`` column value (Murmur3 x86 32-bit, as ``Murmur3_x86_32.hashInt``)."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (_rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _MASK
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


@functools.cache
def bucket_labels(buckets: int) -> tuple[int, ...]:
    """The label of each bucket index ``0 .. buckets-1``: the smallest non-negative ints with
    ``pmod(spark_hash_int(label), buckets) == index`` (see the module docstring)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, got {buckets}")
    labels: list[int | None] = [None] * buckets
    missing = buckets
    candidate = 0
    while missing:
        index = spark_hash_int(candidate) % buckets
        if labels[index] is None:
            labels[index] = candidate
            missing -= 1
        candidate += 1
    return tuple(label for label in labels if label is not None)
