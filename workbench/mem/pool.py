"""Page-size-1 KV memory as in SGLang: ``req_to_token`` maps (request row, position) to a slot,
an allocator hands out slots, and each model owns KV buffers indexed by slot.

Slot 0 is never handed out: padded rows of DP IDLE batches write and read there (a sink).
"""

from __future__ import annotations

import torch


class OutOfSlotsError(RuntimeError):
    """The KV pool (or the request table) has no room for what a batch needs."""


class ReqToTokenPool:
    """req_to_token: (size, max_context_len) int32 slot ids; one row per running request."""

    def __init__(self, size: int, max_context_len: int) -> None:
        self.size = size
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32)
        self._free: list[int] = list(range(size))

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfSlotsError(f"request table full: need {n} rows, {len(self._free)} of {self.size} free")
        rows, self._free = self._free[:n], self._free[n:]
        return rows

    def free(self, rows: list[int]) -> None:
        self._free.extend(rows)

    def available(self) -> int:
        return len(self._free)


class TokenSlotAllocator:
    """Free list of KV slots 1..capacity (slot 0 is the padding sink)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = torch.arange(1, capacity + 1, dtype=torch.int64)

    def alloc(self, n: int) -> torch.Tensor:
        """(n,) int64 slot ids."""
        if n > self._free.numel():
            raise OutOfSlotsError(f"KV pool exhausted: need {n} slots, {self._free.numel()} of {self.capacity} free")
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._free = torch.cat((self._free, slots.to(torch.int64)))

    def available(self) -> int:
        return int(self._free.numel())


class KVCache:
    """Per-layer K and V buffers: (capacity + 1, Hkv, D) each, row = slot."""

    def __init__(self, num_layers: int, capacity: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> None:
        shape = (capacity + 1, num_kv_heads, head_dim)
        self.k_buffers = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]

    def set_kv(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """loc: (T,) slots; k, v: (T, Hkv, D)."""
        self.k_buffers[layer_id][loc] = k.to(self.k_buffers[layer_id].dtype)
        self.v_buffers[layer_id][loc] = v.to(self.v_buffers[layer_id].dtype)

    def get_kv(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_buffers[layer_id], self.v_buffers[layer_id]
