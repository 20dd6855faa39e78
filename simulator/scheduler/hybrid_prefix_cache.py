"""Prefix caching with sliding-window layers: vLLM V1's hybrid KV cache manager with caching on.

The pool of `simulator.scheduler.hybrid_block_manager` (every KV cache group has its own block
table per request, all from one pool; a windowed group frees the blocks behind its window), with
the prefix cache of `simulator.scheduler.prefix_cache` (reference counts, an LRU free queue whose
blocks keep their identity until handed out again, `block_keys` identities), per group: a block of
group g holding the tokens of key k is cached as (k, g), so a hit needs every group's copy (vLLM
`BlockPool.get_cached_block(block_hash, kv_cache_group_ids)`: None unless each group has one).

Read from vLLM (vllm-project/vllm, the 0.19 line): `vllm/v1/core/kv_cache_coordinator.py` @ 52b9a57
(`HybridKVCacheCoordinator.find_longest_cache_hit`) and `vllm/v1/core/single_type_kv_cache_manager.py`
of the same line (`FullAttentionManager` / `SlidingWindowManager.find_longest_cache_hit`,
`get_num_blocks_to_allocate`, `allocate_new_computed_blocks`, `remove_skipped_blocks`):

- Hit length (`lookup`). Full-attention groups first: the longest run of leading blocks cached in
  every full group (at most max_length // block_size blocks). The windowed groups then search that
  prefix from its end for the last run of ceil((sliding_window − 1) / block_size) consecutive
  blocks cached in every windowed group (a query after the hit sees sliding_window − 1 earlier
  tokens): the hit ends where that run ends; without such a run, the hit is the run of cached
  blocks from block 0 (shorter than the window needs, but all of it is there). The full groups'
  hit is cut to that length (one pass: "simple hybrid", one full and one windowed attention type,
  as every model here has). A model with windowed layers only has the windowed search alone
  (`UnitaryKVCacheCoordinator`).
- Admission (`admit_cached`, `blocks_to_admit`): a windowed group takes only the hit blocks its
  window still needs: the first max(0, hit_tokens − sliding_window + 1) // block_size are null
  (not touched, not counted); new blocks are ceil(tokens / block_size) − hit blocks per group;
  hit blocks sitting in the free queue count as taken ("evictable").
- `cache_full_blocks` skips null blocks (a windowed group's freed ones): they are not cached again.
- A windowed group frees, before each step's allocation, the blocks behind its window
  (`remove_skipped_blocks`, tail first); freed full blocks keep their identity in the free queue.
- A request's blocks are freed group by group (`KVCacheCoordinator.free`), each tail first.

Free-queue placement is `PrefixCachingBlockManager`'s (the project's reading of c59cb79 of
`block_pool.py`): full blocks at the tail, partial ones at the head. Not modelled: EAGLE's dropped
last block, groups of different block sizes, several windowed attention types (one window here).
"""
from __future__ import annotations

from collections import OrderedDict

from simulator.scheduler.block_manager import blocks_for
from simulator.scheduler.hybrid_block_manager import HybridBlockManager
from simulator.scheduler.prefix_cache import BlockKey, block_keys
from traces import Request

NULL = -1  # a windowed group's table entry for a block behind the window (vLLM's null block)


class HybridHit(list):
    """A hit of `HybridPrefixCachingBlockManager.lookup`: len() is the hit in blocks; the items are
    group 0's block ids; `groups` holds every group's (NULL before a windowed group's run)."""

    def __init__(self, groups: list[list[int]]):
        super().__init__(groups[0] if groups else [])
        self.groups = groups


class HybridPrefixCachingBlockManager(HybridBlockManager):
    """`HybridBlockManager` with automatic prefix caching per KV cache group (module docstring).

    Groups 0 .. num_full_groups − 1 are full attention, the rest windowed. `block_table(request_id)`
    is group 0's table (NULL entries where group 0 is windowed and has freed a block). Same
    scheduler API as `PrefixCachingBlockManager`: `lookup`, `blocks_to_admit`, `admit_cached`,
    `cache_blocks`, `free_sequence`, plus `remove_skipped_blocks`.
    """

    def __init__(self, num_blocks: int, block_size: int, watermark_fraction: float, num_full_groups: int,
                 num_sliding_groups: int, sliding_window: int):
        super().__init__(num_blocks, block_size, watermark_fraction, num_full_groups, num_sliding_groups,
                         sliding_window)
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # head first
        self._free = self._queue
        self._ref = [0] * num_blocks
        self._key: list[tuple | None] = [None] * num_blocks  # (BlockKey, group) of a cached block
        self._cached: dict[tuple, dict[int, None]] = {}  # (key, group) -> block ids, first is hit
        self._group_tables: dict[int, list[list[int]]] = {}
        self._num_cached_blocks: dict[int, int] = {}  # request id -> leading blocks registered
        self._window_blocks = -(-(sliding_window - 1) // block_size)  # run a windowed hit ends with

    # ----- counts ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._queue)

    def blocks_held(self, request_id: int) -> int:
        return sum(len(t) - t.count(NULL) for t in self._group_tables.get(request_id, ()))

    def is_cached(self, block_id: int) -> bool:
        """True if the block holds a registered key (it may be hit)."""
        return self._key[block_id] is not None

    def ref_count(self, block_id: int) -> int:
        """Requests holding the block."""
        return self._ref[block_id]

    def free_block_ids(self) -> list[int]:
        """The free queue, head (next handed out) first."""
        return list(self._queue)

    def _skipped_blocks(self, num_tokens: int) -> int:
        """Leading blocks a windowed group no longer needs once `num_tokens` are computed
        (`SlidingWindowManager.get_num_skipped_tokens` // block_size)."""
        return max(0, num_tokens - self.sliding_window + 1) // self.block_size

    # ----- lookup and admission -------------------------------------------------------------
    def lookup(self, request: Request, max_blocks: int) -> HybridHit:
        """The longest hit of `request`'s leading blocks, at most `max_blocks` (module docstring).
        Changes nothing."""
        keys = block_keys(request, self.block_size, 0, max_blocks)
        cached, full = self._cached, self.num_full_groups
        groups = range(full + self.num_sliding_groups)

        def hit_in(j: int, group_ids) -> bool:
            return all((keys[j], g) in cached for g in group_ids)

        n = 0 if full else max_blocks
        while full and n < max_blocks and hit_in(n, groups[:full]):
            n += 1
        run, start = 0, 0  # SlidingWindowManager: right to left, stop at the first long-enough run
        for i in range(n - 1, -1, -1):
            if hit_in(i, groups[full:]):
                run += 1
                if run >= self._window_blocks:
                    start, n = i, i + run
                    break
            else:
                run = 0
        else:
            n = run  # the cached run from block 0
        return HybridHit([[next(iter(cached[keys[j], g])) if g < full or j >= start else NULL for j in range(n)]
                          for g in groups])

    def num_cached_prefix_blocks(self, request: Request) -> int:
        """Leading blocks of `request`'s prompt admission would hit now (read-only: a router's)."""
        return len(self.lookup(request, (request.prompt_tokens - 1) // self.block_size))

    def _taken(self, hit: HybridHit) -> list[list[int]]:
        """Each group's hit blocks admission touches: a windowed group's from the first its window needs."""
        skipped = self._skipped_blocks(len(hit) * self.block_size)
        return [blocks if g < self.num_full_groups else [b for b in blocks[skipped:] if b != NULL]
                for g, blocks in enumerate(hit.groups)]

    def blocks_to_admit(self, num_tokens: int, hit: HybridHit) -> int:
        """Free blocks admitting a request of `num_tokens` slots with `hit` uses: new blocks in every
        group plus the hit blocks taken out of the free queue (`get_num_blocks_to_allocate`)."""
        new = (blocks_for(num_tokens, self.block_size) - len(hit)) * self._groups
        return new + sum(self._ref[b] == 0 for blocks in self._taken(hit) for b in blocks)

    def num_evictable(self, hit: HybridHit) -> int:
        """Hit blocks admission would take out of the free queue."""
        return sum(self._ref[b] == 0 for blocks in self._taken(hit) for b in blocks)

    def admit_cached(self, request_id: int, hit: HybridHit) -> None:
        """Start `request_id`'s tables with `hit` (`allocate_new_computed_blocks`: a windowed group's
        skipped blocks null, the others touched).

        Raises:
            RuntimeError: the request already holds blocks.
        """
        if self._tables.get(request_id):
            raise RuntimeError(f"request {request_id} already holds blocks; a hit starts an empty table")
        skipped = self._skipped_blocks(len(hit) * self.block_size)
        tables = []
        for g, (blocks, taken) in enumerate(zip(hit.groups, self._taken(hit))):
            for b in taken:
                if self._ref[b] == 0:
                    del self._queue[b]
                self._ref[b] += 1
            tables.append(list(blocks) if g < self.num_full_groups else [NULL] * skipped + list(blocks[skipped:]))
        self._group_tables[request_id] = tables
        self._tables[request_id] = tables[0]
        self._num_cached_blocks[request_id] = len(hit)
        self._skipped[request_id] = skipped

    # ----- allocation and release -----------------------------------------------------------
    def grow_to(self, request_id: int, num_tokens: int) -> None:
        """Give every group's table ceil(num_tokens / block_size) entries, new blocks from the
        queue head (group by group, as the coordinator allocates), each losing its key.

        Raises:
            RuntimeError: too few free blocks.
        """
        tables = self._group_tables.get(request_id)
        if tables is None:
            tables = self._group_tables[request_id] = [[] for _ in range(self._groups)]
            self._tables[request_id] = tables[0]
            self._skipped[request_id] = 0
        new = blocks_for(num_tokens, self.block_size) - len(tables[0])
        if new <= 0:
            return
        if new * self._groups > len(self._queue):
            raise RuntimeError(f"KV pool exhausted: request {request_id} needs {new * self._groups} more blocks, "
                               f"{len(self._queue)} free")
        for table in tables:
            for _ in range(new):
                b, _ = self._queue.popitem(last=False)
                if self._key[b] is not None:
                    self._drop_key(b)  # evict it
                self._ref[b] = 1
                table.append(b)

    def remove_skipped_blocks(self, request_id: int, num_computed_tokens: int) -> None:
        """Free the windowed groups' blocks behind the window (tail first); they stay cached."""
        tables = self._group_tables.get(request_id)
        if tables is None:
            return
        skipped = min(self._skipped_blocks(num_computed_tokens), len(tables[0]))
        if skipped <= self._skipped.get(request_id, 0):
            return
        self._skipped[request_id] = skipped
        for table in tables[self.num_full_groups:]:
            removed = []
            for i in range(skipped - 1, -1, -1):
                if table[i] == NULL:
                    break
                removed.append(table[i])
                table[i] = NULL
            self._release(removed, [])

    def cache_blocks(self, request_id: int, num_tokens: int, request: Request) -> None:
        """Register every group's blocks that `request`'s first `num_tokens` final tokens fill
        (`cache_full_blocks`: null ones skipped)."""
        tables = self._group_tables[request_id]
        full = min(num_tokens // self.block_size, len(tables[0]))
        done = self._num_cached_blocks.get(request_id, 0)
        if full <= done:
            return
        keys = block_keys(request, self.block_size, done, full)
        for g, table in enumerate(tables):
            for b, key in zip(table[done:full], keys):
                if b != NULL:
                    self._key[b] = (key, g)
                    self._cached.setdefault((key, g), {})[b] = None
        self._num_cached_blocks[request_id] = full

    def _drop_key(self, block_id: int) -> None:
        key = self._key[block_id]
        self._key[block_id] = None
        present = self._cached[key]
        del present[block_id]
        if not present:
            del self._cached[key]

    def shrink_to(self, request_id: int, num_tokens: int) -> None:
        """Release every group's blocks beyond ceil(num_tokens / block_size) (rejected drafts: never cached)."""
        tables = self._group_tables.get(request_id)
        if tables is None:
            return
        keep = max(blocks_for(num_tokens, self.block_size), self._skipped.get(request_id, 0))
        for table in tables:
            dropped = table[keep:]
            del table[keep:]
            self._release([], dropped[::-1])
        if self._num_cached_blocks.get(request_id, 0) > keep:
            self._num_cached_blocks[request_id] = keep

    def free(self, request_id: int) -> None:
        """Release every block of `request_id` (only registered ones count as full)."""
        self.free_sequence(request_id, 0, None, False)

    def free_sequence(self, request_id: int, num_computed_tokens: int, request: Request | None,
                      resumes: bool) -> None:
        """Release every block of `request_id`, whose first `num_computed_tokens` tokens are computed,
        group by group, tail first; as `PrefixCachingBlockManager.free_sequence` (full blocks of a
        request that `resumes` by recompute are registered first; registered blocks past the
        computed ones lose their key)."""
        if self._unpinned is not None:
            self._keep_table(request_id)
        tables = self._group_tables.pop(request_id, None)
        self._tables.pop(request_id, None)
        self._skipped.pop(request_id, None)
        registered = self._num_cached_blocks.pop(request_id, 0)
        if tables is None:
            return
        full = min(len(tables[0]), num_computed_tokens // self.block_size) if request is not None else registered
        for table in tables:
            for b in table[full:registered]:
                if b != NULL and self._ref[b] == 1 and self._key[b] is not None:
                    self._drop_key(b)  # registered for tokens never computed
        if resumes and full > registered:
            self._group_tables[request_id] = tables
            self._num_cached_blocks[request_id] = registered
            self.cache_blocks(request_id, full * self.block_size, request)
            del self._group_tables[request_id], self._num_cached_blocks[request_id]
        for table in tables:
            self._release([b for b in table[:full][::-1] if b != NULL], [b for b in table[full:][::-1] if b != NULL])

    def _release(self, full: list[int], partial: list[int]) -> None:
        """Count − 1 for each block; those reaching 0 rejoin the queue: `partial` (tail first) at
        the head, `full` (in eviction order) at the tail. Partial blocks precede the full ones."""
        ref, queue = self._ref, self._queue
        freed_partial = []
        for b in partial:
            ref[b] -= 1
            if not ref[b]:
                freed_partial.append(b)
        for b in reversed(freed_partial):  # at the head, keeping their order
            queue[b] = None
            queue.move_to_end(b, last=False)
        for b in full:
            ref[b] -= 1
            if not ref[b]:
                queue[b] = None
