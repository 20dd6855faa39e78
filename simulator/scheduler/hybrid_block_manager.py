"""The KV pool of a model with sliding-window layers under vLLM's hybrid KV cache manager.

vLLM V1 groups the layers into KV cache groups of equal size (`profiler.kv_cache_groups`) and
gives every request a block table per group, all from one block pool: a request with slots for
N tokens holds ceil(N / block_size) blocks in each full-attention group and, in each
sliding-window group, those blocks less the ones behind its window. Before a step allocates,
`KVCacheManager.allocate_slots` calls `remove_skipped_blocks(request_id, num_computed_tokens)`
(vllm/v1/core/single_type_kv_cache_manager.py, `SlidingWindowManager.get_num_skipped_tokens`:
skipped = max(0, num_computed_tokens − sliding_window + 1)), which frees the table's first
skipped // block_size blocks (the null block takes their place: the table keeps its length).
New blocks are then allocated in every group for the tokens beyond the table
(`get_num_blocks_to_allocate`: (cdiv(num_tokens, block_size) − len(table)) per group).
"""
from __future__ import annotations

from simulator.scheduler.block_manager import BlockManager, blocks_for


class HybridBlockManager(BlockManager):
    """`BlockManager` whose pool blocks are KV-cache-group blocks (module docstring).

    `block_table(request_id)` is the first group's table (the length every group's table has);
    `blocks_held` counts the blocks of all groups. A request's windowed groups free blocks only
    through `remove_skipped_blocks`, which the vllm_v1 scheduler calls before each allocation, as
    vLLM does.

    Args:
        num_full_groups, num_sliding_groups: the groups of each kind (≥ 1 in all).
        sliding_window: tokens a windowed layer's query sees, its own included.
    """

    hybrid = True

    def __init__(self, num_blocks: int, block_size: int, watermark_fraction: float, num_full_groups: int,
                 num_sliding_groups: int, sliding_window: int):
        super().__init__(num_blocks, block_size, watermark_fraction)
        if num_full_groups < 0 or num_sliding_groups < 1 or num_full_groups + num_sliding_groups < 1 or sliding_window < 1:
            raise ValueError(f"KV cache groups ({num_full_groups} full, {num_sliding_groups} sliding, window "
                             f"{sliding_window}) need a sliding group and a window >= 1")
        self.num_full_groups, self.num_sliding_groups = num_full_groups, num_sliding_groups
        self.sliding_window = sliding_window
        self._groups = num_full_groups + num_sliding_groups
        self._others: dict[int, list[int]] = {}  # the other full groups' blocks
        self._sliding: dict[int, list[int]] = {}  # the live sliding-window blocks, oldest first
        self._skipped: dict[int, int] = {}  # leading table blocks each sliding group has freed

    def blocks_held(self, request_id: int) -> int:
        table = self._tables.get(request_id)
        if table is None:
            return 0
        return (len(table) + len(self._others.get(request_id, ())) + len(self._sliding.get(request_id, ()))
                if self.num_full_groups else len(self._sliding.get(request_id, ())))

    def blocks_held_each(self, request_ids: list[int]) -> list[int]:
        return [self.blocks_held(rid) for rid in request_ids]

    def remove_skipped_blocks(self, request_id: int, num_computed_tokens: int) -> None:
        """Free the windowed groups' blocks no query after `num_computed_tokens` can see."""
        table = self._tables.get(request_id)
        if table is None:
            return
        target = min(max(0, num_computed_tokens - self.sliding_window + 1) // self.block_size, len(table))
        done = self._skipped.get(request_id, 0)
        if target > done:
            sliding = self._sliding[request_id]
            count = (target - done) * self.num_sliding_groups
            self._free.extend(sliding[:count])
            del sliding[:count]
            self._skipped[request_id] = target

    def _extra_blocks(self, request_id: int, num_tokens: int) -> int:
        table = self._tables.get(request_id)
        return max(0, blocks_for(num_tokens, self.block_size) - (len(table) if table else 0)) * self._groups

    def try_grow_to(self, request_id: int, num_tokens: int) -> bool:
        if self._extra_blocks(request_id, num_tokens) > self.num_free:
            return False
        self.grow_to(request_id, num_tokens)
        return True

    def can_admit(self, num_tokens: int) -> bool:
        return self.num_free - blocks_for(num_tokens, self.block_size) * self._groups >= self.watermark_blocks

    def capacity_tokens(self, request_id: int) -> int:
        table = self._tables.get(request_id, ())
        return (len(table) + self.num_free // self._groups) * self.block_size

    def peak_blocks(self, num_tokens: int, token_budget: int) -> int:
        """An upper bound of the blocks a request of `num_tokens` tokens ever holds alone: every
        full group's ceil(num_tokens / block_size), and in each windowed group at most the window
        and one step's tokens (a chunk of up to `token_budget`) plus one block (the window need
        not start at a block's start)."""
        table = blocks_for(num_tokens, self.block_size)
        window = min(table, blocks_for(self.sliding_window - 1 + token_budget, self.block_size) + 1)
        return self.num_full_groups * table + self.num_sliding_groups * window

    def grow_to(self, request_id: int, num_tokens: int) -> None:
        table = self._tables.setdefault(request_id, [])
        new = blocks_for(num_tokens, self.block_size) - len(table)
        if new <= 0:
            return
        free = self._free
        if new * self._groups > len(free):
            raise RuntimeError(f"KV pool exhausted: request {request_id} needs {new * self._groups} more blocks, "
                               f"{len(free)} free")
        take = [free.popleft() for _ in range(new * self._groups)]
        if self.num_full_groups:
            table.extend(take[:new])
            self._others.setdefault(request_id, []).extend(take[new:new * self.num_full_groups])
            self._sliding.setdefault(request_id, []).extend(take[new * self.num_full_groups:])
        else:  # every layer windowed: the table is nominal (its length), the blocks are the sliding list's
            table.extend([-1] * new)
            self._sliding.setdefault(request_id, []).extend(take)
        self._skipped.setdefault(request_id, 0)

    def shrink_to(self, request_id: int, num_tokens: int) -> None:
        table = self._tables.get(request_id)
        if table is None:
            return
        drop = len(table) - max(blocks_for(num_tokens, self.block_size), self._skipped.get(request_id, 0))
        if drop <= 0:
            return
        dropped = table[len(table) - drop:]
        del table[len(table) - drop:]
        free = self._free
        if self.num_full_groups:
            free.extend(dropped)
        for store, per_block in ((self._others, self.num_full_groups - 1), (self._sliding, self.num_sliding_groups)):
            blocks = store.get(request_id)
            if blocks and per_block:
                count = min(drop * per_block, len(blocks))
                free.extend(blocks[len(blocks) - count:])
                del blocks[len(blocks) - count:]

    def free(self, request_id: int) -> None:
        if self._unpinned is not None:
            self._keep_table(request_id)
        table = self._tables.pop(request_id, ())
        if self.num_full_groups:
            self._free.extend(table)
        self._free.extend(self._others.pop(request_id, ()))
        self._free.extend(self._sliding.pop(request_id, ()))
        self._skipped.pop(request_id, None)
