"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

The backend of #ephemeral topics and channels: overflow is dropped and nothing touches the disk."""

from __future__ import annotations

__all__ = ["DummyBackend"]


class DummyBackend:
    """Go nsqd's dummy backend queue: takes every put, never has anything to read."""

    __slots__ = ()

    def put(self, data: bytes) -> None:
        pass

    def put_many(self, records: list[bytes]) -> None:
        pass

    def read_one(self) -> tuple[bytes, object] | None:
        return None

    def peek(self, limit: int) -> list[bytes]:
        return []

    def ack(self, token: object) -> None:
        pass

    def depth(self) -> int:
        return 0

    def unread_bytes(self) -> int:
        return 0

    def sync(self) -> None:
        pass

    def empty(self) -> None:
        pass

    def delete(self) -> None:
        pass

    def close(self) -> None:
        pass
