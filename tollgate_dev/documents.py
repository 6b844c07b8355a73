"""A versioned document store in memory (the DocumentStore port without S3), for the property test and the
scale benchmark, where what is measured or modelled is the database, not an object store."""

from __future__ import annotations


class MemoryDocuments:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    def put(self, key: str, body: bytes) -> str:
        version = f"v{len(self.objects) + 1}"
        self.objects[(key, version)] = body
        return version

    def get(self, key: str, version_id: str, max_bytes: int) -> bytes:
        return self.objects[(key, version_id)]
