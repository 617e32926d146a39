"""The victim of the SIGKILL test: commits checkpoints to an SQLite store in a loop, forever.

Checkpoint ``n`` makes a deterministic set of changes (:func:`changes`), so the test can compute what the store
must hold after any committed checkpoint. After each commit returns, the checkpoint id goes to stdout.

Run as ``python crash_writer.py STORE_PATH``.
"""

from __future__ import annotations

import sys
import zlib

from reaqtive.state import BlobWriter, SqliteCheckpointStore

KEYS = 12


def blob(n: int, key: int) -> bytes:
    """A real state blob (framed, checksummed) of a varying size, up to ~48 KiB."""
    size = zlib.crc32(f"{n}/{key}".encode()) % 48_000
    payload = (f"{n}:{key}:".encode() * (size // 8 + 1))[:size]
    writer = BlobWriter()
    writer.write_node(
        (0,), "test:crash", (1,), lambda w, v: (w.write(False), w.write(n), w.write(key), w.write(payload))
    )
    return writer.finish()


def changes(n: int) -> list[tuple[str, str, bytes | None]]:
    """Checkpoint ``n``: ``(category, key, blob)`` puts and ``(category, key, None)`` deletes."""
    out: list[tuple[str, str, bytes | None]] = [("meta", "latest", str(n).encode())]
    for key in range(KEYS):
        if (n + key) % 3 == 0:
            out.append(("state", f"sub://{key}", blob(n, key)))
        elif (n * 7 + key) % 5 == 0:
            out.append(("state", f"sub://{key}", None))
    return out


def main(path: str) -> None:
    store = SqliteCheckpointStore(path)
    n = store.read().checkpoint_id
    while True:
        n += 1
        with store.begin() as transaction:
            for category, key, value in changes(n):
                if value is None:
                    transaction.delete(category, key)
                else:
                    transaction.put(category, key, value)
            committed = transaction.commit()
        assert committed == n
        print(n, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
