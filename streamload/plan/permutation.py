"""A keyed bijection on ``[0, n)``: shuffling without an ``n``-sized array.

A balanced Feistel network permutes ``[0, 4^h)`` (the smallest power of four ``>= n``); values
that land outside ``[0, n)`` are encrypted again ("cycle walking") until they land inside, which
keeps the map a bijection on ``[0, n)``. Expected work per lookup is below four network passes
because ``4^h < 4n``. Round keys come from BLAKE2b of ``(seed, epoch, source)``, so each epoch of
each source has its own independent-looking permutation and nothing depends on global RNG state.

Example:
    >>> p = KeyedPermutation(5, derive_key(seed=1, epoch=0, stream="web"))
    >>> sorted(p(np.arange(5)).tolist())
    [0, 1, 2, 3, 4]

The algorithm is versioned (``ALGORITHM``) and its version is part of the state fingerprint:
changing it changes every shuffled order.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["ALGORITHM", "ROUNDS", "KeyedPermutation", "derive_key"]

ALGORITHM = "feistel4-murmix-v1"
ROUNDS = 4

_M1_INT = 0xBF58476D1CE4E5B9
_M2_INT = 0x94D049BB133111EB
_U64 = (1 << 64) - 1
_M1 = np.uint64(_M1_INT)
_M2 = np.uint64(_M2_INT)
_SCALAR_WALK = 16


def derive_key(*, seed: int, epoch: int, stream: str) -> bytes:
    """The 8·ROUNDS-byte key of one (seed, epoch, stream) permutation."""
    text = f"streamload/{ALGORITHM}/seed={seed}/stream={stream}/epoch={epoch}"
    return hashlib.blake2b(text.encode(), digest_size=8 * ROUNDS).digest()


def _mix(x: np.ndarray, key: np.uint64) -> np.ndarray:
    """Multiply-xorshift mixing of ``x ^ key`` (MurmurHash3-style finalizer, wrapping)."""
    z = x ^ key
    z *= _M1
    z ^= z >> np.uint64(29)
    z *= _M2
    z ^= z >> np.uint64(32)
    return z


class KeyedPermutation:
    """A bijection on ``[0, n)`` defined by a key.

    Args:
        n: Domain size (>= 1).
        key: ``8 * ROUNDS`` bytes, e.g. from :func:`derive_key`.
    """

    def __init__(self, n: int, key: bytes) -> None:
        if n < 1:
            raise ValueError(f"permutation domain size must be >= 1, got {n}")
        self.n = n
        bits = max(2, (n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)
        self._keys = np.frombuffer(key, dtype="<u8", count=ROUNDS).astype(np.uint64)

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            f = _mix(right, key)
            f &= self._mask
            f ^= left
            left, right = right, f
        return (left << self._half) | right

    def __call__(self, index: np.ndarray) -> np.ndarray:
        """Map indices in ``[0, n)`` to their images (int64, same shape).

        Indices outside ``[0, n)`` are a caller bug; they raise ``IndexError``.
        """
        x = np.asarray(index, dtype=np.int64)
        u = x.astype(np.uint64).ravel()
        n = np.uint64(self.n)
        if u.size and u.max() >= n:  # negative int64 values wrap to huge uint64 values
            raise IndexError(f"permutation index out of range [0, {self.n})")
        y = self._encrypt(u)
        outside = np.flatnonzero(y >= n)
        while outside.size > _SCALAR_WALK:
            y[outside] = self._encrypt(y[outside])
            outside = outside[y[outside] >= n]
        for i in outside.tolist():  # a few stragglers: cheaper in Python than in numpy calls
            y[i] = self._walk_scalar(int(y[i]))
        return y.astype(np.int64).reshape(x.shape)

    def _walk_scalar(self, value: int) -> int:
        half, mask = int(self._half), int(self._mask)
        keys = [int(k) for k in self._keys]
        while value >= self.n:
            left, right = value >> half, value & mask
            for key in keys:
                z = ((right ^ key) * _M1_INT) & _U64
                z ^= z >> 29
                z = (z * _M2_INT) & _U64
                z ^= z >> 32
                left, right = right, left ^ (z & mask)
            value = (left << half) | right
        return value
