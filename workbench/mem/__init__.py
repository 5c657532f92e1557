"""Paged KV memory: request-to-token table, slot allocator, per-layer KV buffers (page size 1)."""

from workbench.mem.pool import KVCache, ReqToTokenPool, TokenSlotAllocator

__all__ = ["KVCache", "ReqToTokenPool", "TokenSlotAllocator"]
