"""Automatic prefix caching: full KV blocks keep their token identity after they are freed, so
a later request with the same prefix (or a preempted request resuming) reuses them.

Semantics of vLLM V1's `KVCacheManager` / `BlockPool` (read from vLLM's source, main-branch
snapshot c59cb79 of `vllm/v1/core/block_pool.py` and ace980e of `vllm/v1/core/kv_cache_manager.py`,
the 0.19 line):

- A block is *cached* once it is full of final tokens: `allocate_slots` caches up to
  `min(computed + new tokens, request.num_tokens)` tokens when it allocates a step's slots
  (draft tokens excluded), `BlockPool.cache_full_blocks`.
- Its identity is a chained hash: the parent block's hash and the block's tokens
  (`kv_cache_utils.hash_block_tokens`). Here a block's identity is `block_key` below.
- Cached blocks are reference-counted and shared (`BlockPool.touch`); a block whose count drops
  to 0 goes back to the free queue but keeps its hash, so it can still be hit until the pool
  hands it out again (`BlockPool.get_new_blocks` pops the queue head and evicts its hash,
  `_maybe_evict_cached_block`).
- `KVCacheManager.free` releases a request's blocks in reverse order, "so that the tail blocks
  are evicted first"; `BlockPool.free_blocks` appends the freed blocks that have a hash to the
  queue's tail (LRU) and puts those without one (a partial last block) at its head, to be
  reused first (`FreeKVCacheBlockQueue.prepend_n`).
- Duplicates are kept: a block filled with content that another cached block already holds is
  cached too (vLLM's `BlockHashToBlockMap` maps a hash to one block or to {block_id: block});
  a lookup returns the first one.
- Lookup (`KVCacheManager.get_computed_blocks`) walks the request's block hashes from the start
  and stops at the first miss (`find_longest_cache_hit`), capped at `num_tokens - 1` tokens
  ("we must recompute the last token to obtain logits"), so a hit is a whole number of blocks.

Token identity. The simulator has token counts, not token ids. A request's token stream
(prompt, then output) is described by `Request.prefix_hash_ids`: id k names the stream's
tokens up to the end of its `prefix_block_tokens`-token block (a chained id, as Mooncake's
512-token `hash_ids` are), and the tokens the ids do not name are unique to the request
(`named_tokens`). The KV block ending at token e (exclusive) is identified by (the id of the
hash block holding token e - 1, e) while the ids name it, else by (request_id, block index, 0):
a request without ids has unique content, so only its own blocks, after its own preemption,
can be hit.
"""
from __future__ import annotations

from collections import deque
from itertools import repeat, starmap

from simulator.scheduler.block_manager import BlockManager, blocks_for
from traces import Request

# A block's identity: (hash id, end token) for a shared prefix, (request_id, index, 0) for a
# request's own content (tuples of different lengths never compare equal).
BlockKey = tuple


def named_tokens(request: Request) -> int:
    """Stream tokens that `request.prefix_hash_ids` name.

    An id on the block that holds the prompt's last token names the prompt's tokens in it only
    (Mooncake hashes a partial last block over the prompt tokens it has); ids after that block
    name output tokens too (a session turn's answer, which the next turn's prompt repeats).
    """
    ids, size = request.prefix_hash_ids, request.prefix_block_tokens
    prompt_blocks = -(-request.prompt_tokens // size)
    if len(ids) <= prompt_blocks:
        return min(len(ids) * size, request.prompt_tokens)
    return min(len(ids) * size, request.prompt_tokens + request.output_tokens)


def block_keys(request: Request, block_size: int, first_block: int, last_block: int) -> list[BlockKey]:
    """Identities of KV blocks `first_block` .. `last_block - 1` of `request`'s token stream,
    `block_size` tokens each (see the module docstring), in order."""
    ids, size = request.prefix_hash_ids, request.prefix_block_tokens
    named = named_tokens(request) if ids else 0
    rid = request.request_id
    keys = []
    for j in range(first_block, last_block):
        end = (j + 1) * block_size
        keys.append((ids[(end - 1) // size], end) if end <= named else (rid, j, 0))
    return keys


class PrefixCachingBlockManager(BlockManager):
    """A `BlockManager` whose freed full blocks stay cached until reused (module docstring).

    State, per physical block: a reference count (requests holding it) and its key (None for a
    block not full of final tokens, or not registered, `free_sequence`). The free queue holds
    every block with count 0, cached or not, head first to be handed out; `num_free` counts
    cached free blocks as free, as vLLM's `BlockPool.get_num_free_blocks` and its KV-usage gauge
    do. The count is kept implicitly, for speed: 0 in the free queue, else 1 plus the block's
    entry in `_shared` (holders beyond the first; most blocks are never shared).

    The free queue is a deque with lazy deletion (an OrderedDict costs ~10x per block): taking a
    free block out of its middle (a hit, `admit_cached`) bumps the block's generation, which
    makes its queue entry stale; entries are `generation * num_blocks + block id`, and a stale
    one is skipped when it reaches the head. `_is_free` says whether a block is in the queue.

    Extra API for the scheduler: `lookup` (longest cached prefix), `admit_cached` (take the hit
    blocks), `cache_blocks` (register a request's newly full blocks).
    """

    def __init__(self, num_blocks: int, block_size: int, watermark_fraction: float = 0.0):
        super().__init__(num_blocks, block_size, watermark_fraction)
        self._queue: deque[int] = self._free  # the base class's deque of range(num_blocks)
        self._gen = [0] * num_blocks
        self._any_gen = False  # some block's generation is not 0 (entries need encoding)
        self._is_free = bytearray(b"\x01") * num_blocks
        self._num_free = num_blocks
        self._shared: dict[int, int] = {}  # block id -> holders - 1, for blocks held by several
        self._key: list[BlockKey | None] = [None] * num_blocks
        self._cached: dict[BlockKey, int | dict[int, None]] = {}  # key -> block id, or ids (duplicates)
        self._num_cached_blocks: dict[int, int] = {}  # request id -> leading blocks registered

    # ----- lookup and sharing -----------------------------------------------------------------
    def lookup(self, request: Request, max_blocks: int) -> list[int]:
        """Block ids of the longest cached run of `request`'s blocks from its first, at most
        `max_blocks` (the first of duplicates). Changes nothing (vLLM
        `FullAttentionManager.find_longest_cache_hit`: stop at the first miss)."""
        hit = []
        cached = self._cached
        ids, size, step = request.prefix_hash_ids, request.prefix_block_tokens, self.block_size
        shared = (named_tokens(request) if ids else 0) // step  # blocks the ids name
        for j in range(max_blocks):
            end = (j + 1) * step
            key = (ids[(end - 1) // size], end) if j < shared else (request.request_id, j, 0)
            found = cached.get(key)
            if found is None:
                break
            hit.append(found if isinstance(found, int) else next(iter(found)))
        return hit

    def num_cached_prefix_blocks(self, request: Request) -> int:
        """Leading blocks of `request`'s prompt cached now, as admission would hit them (at most
        (prompt_tokens - 1) // block_size: the last prompt token is always computed, vLLM
        `KVCacheManager.get_computed_blocks`). Read-only: for a router (`simulator.router`)."""
        return len(self.lookup(request, (request.prompt_tokens - 1) // self.block_size))

    def num_evictable(self, block_ids: list[int]) -> int:
        """How many of `block_ids` sit in the free queue (count 0): taking them uses free blocks."""
        is_free = self._is_free
        return sum(is_free[b] for b in block_ids)

    def blocks_to_admit(self, num_tokens: int, block_ids: list[int]) -> int:
        """Free blocks admitting a request of `num_tokens` slots whose hit is `block_ids` uses: the
        new blocks plus the hit blocks taken out of the free queue (vLLM `allocate_slots`)."""
        return blocks_for(num_tokens, self.block_size) - len(block_ids) + self.num_evictable(block_ids)

    def admit_cached(self, request_id: int, block_ids: list[int]) -> None:
        """Start `request_id`'s table with the hit blocks (`BlockPool.touch`: count + 1, out of
        the free queue if it was 0). They are already registered.

        Raises:
            RuntimeError: the request already holds blocks.
        """
        if self._tables.get(request_id):
            raise RuntimeError(f"request {request_id} already holds blocks; a hit starts an empty table")
        is_free, gen, shared = self._is_free, self._gen, self._shared
        for b in block_ids:
            if is_free[b]:  # out of the queue: its entry goes stale
                is_free[b] = 0
                gen[b] += 1
                self._num_free -= 1
                self._any_gen = True
            else:
                shared[b] = shared.get(b, 0) + 1
        self._tables[request_id] = list(block_ids)
        self._num_cached_blocks[request_id] = len(block_ids)

    def cache_blocks(self, request_id: int, num_tokens: int, request: Request) -> None:
        """Register the blocks of `request` (held as `request_id`) that its first `num_tokens`
        final tokens fill (`BlockPool.cache_full_blocks`; keys from `block_keys`)."""
        full = num_tokens // self.block_size
        done = self._num_cached_blocks.get(request_id, 0)
        if full <= done:
            return
        table = self._tables[request_id]
        key_of, cached = self._key, self._cached
        keys = block_keys(request, self.block_size, done, full)
        for b, key in zip(table[done:full], keys):
            key_of[b] = key
            present = cached.get(key)
            if present is None:
                cached[key] = b
            elif isinstance(present, int):
                cached[key] = {present: None, b: None}
            else:
                present[b] = None
        self._num_cached_blocks[request_id] = full

    def is_cached(self, block_id: int) -> bool:
        """True if the block holds a registered key (it may be hit)."""
        return self._key[block_id] is not None

    def ref_count(self, block_id: int) -> int:
        """Requests holding the block."""
        return 0 if self._is_free[block_id] else 1 + self._shared.get(block_id, 0)

    def free_block_ids(self) -> list[int]:
        """The free queue, head (next handed out) first."""
        n, gen, is_free = self.num_blocks, self._gen, self._is_free
        return [e % n for e in self._queue if is_free[e % n] and e // n == gen[e % n]]

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_used(self) -> int:
        return self.num_blocks - self._num_free

    # ----- the base class's allocation, with counts and eviction ---------------------------
    def grow_to(self, request_id: int, num_tokens: int) -> None:
        """As `BlockManager.grow_to`; each block taken from the queue head loses its key."""
        table = self._tables.get(request_id)
        if table is None:
            table = self._tables[request_id] = []
        extra = -(-num_tokens // self.block_size) - len(table)
        if extra <= 0:
            return
        if extra > self._num_free:
            raise RuntimeError(
                f"KV pool exhausted: request {request_id} needs {extra} more blocks, {self._num_free} free"
            )
        pop, key_of, is_free = self._queue.popleft, self._key, self._is_free
        if extra == 1 and not self._any_gen:  # a decode's next block, no stale entry: the common case
            b = pop()
            is_free[b] = 0
            if key_of[b] is not None:
                self._drop_key(b)  # evict it
            table.append(b)
            self._num_free -= 1
            return
        if not self._any_gen:  # several blocks (a prompt's chunk), no stale entry: taken at C level
            taken = list(starmap(pop, repeat((), extra)))
            for b in taken:
                is_free[b] = 0
            for b in [b for b in taken if key_of[b] is not None]:
                self._drop_key(b)  # evict it (in queue order, as one by one)
            table.extend(taken)
            self._num_free -= extra
            return
        n, gen, stale = self.num_blocks, self._gen, self._any_gen
        for _ in range(extra):
            b = pop()
            if stale:
                while not (is_free[b % n] and b // n == gen[b % n]):  # a stale entry: skip it
                    b = pop()
                b %= n
            is_free[b] = 0
            if key_of[b] is not None:
                self._drop_key(b)  # evict it
            table.append(b)
        self._num_free -= extra

    def _drop_key(self, block_id: int) -> None:
        key = self._key[block_id]
        self._key[block_id] = None
        present = self._cached.pop(key)
        if not isinstance(present, int):  # duplicates: keep the others
            del present[block_id]
            self._cached[key] = next(iter(present)) if len(present) == 1 else present

    def shrink_to(self, request_id: int, num_tokens: int) -> None:
        """Release blocks beyond ceil(num_tokens / block_size) (rejected draft slots: never cached)."""
        table = self._tables.get(request_id, [])
        keep = -(-num_tokens // self.block_size)
        released = []
        while len(table) > keep:
            released.append(table.pop())
        self._release(released)
        if self._num_cached_blocks.get(request_id, 0) > len(table):
            self._num_cached_blocks[request_id] = len(table)

    def free(self, request_id: int) -> None:
        """Release every block of `request_id`, tail first (`KVCacheManager.free`); those
        without a key count as not full."""
        self.free_sequence(request_id, 0, None, False)

    def free_sequence(self, request_id: int, num_computed_tokens: int, request: Request | None,
                      resumes: bool) -> None:
        """Release every block of `request_id` (tail first, `KVCacheManager.free`), whose first
        `num_computed_tokens` tokens are computed.

        Registration is lazy for content only the request itself can hit (blocks no id names:
        `block_keys`): nobody else can look them up, so the scheduler does not register them
        while the request runs. If it `resumes` (a recompute preemption), its full blocks are
        registered now, before they are freed, so its re-admission can hit them as in vLLM;
        otherwise (it finished, or was swapped out) its full blocks just go to the queue's tail
        as vLLM's hashed ones do, with no key (no one could ever hit them).
        """
        if self._unpinned is not None:  # a plan's lazy block tables (`BlockTables`)
            self._keep_table(request_id)
        table = self._tables.pop(request_id, [])
        registered = self._num_cached_blocks.pop(request_id, 0)
        full = min(len(table), num_computed_tokens // self.block_size) if request is not None else registered
        for b in table[full:registered]:
            # Registered for a chunk that was never computed (a priority victim taken out of
            # the step it was scheduled in): vLLM keeps such hashes; their KV was never
            # written, so here they are dropped.
            if b not in self._shared and self._key[b] is not None:
                self._drop_key(b)
        if resumes and full > registered:
            self._tables[request_id] = table
            self._num_cached_blocks[request_id] = registered
            self.cache_blocks(request_id, full * self.block_size, request)
            del self._tables[request_id], self._num_cached_blocks[request_id]
        self._release(table[::-1], len(table) - full)  # a copy: a plan may still read the table

    def _release(self, blocks: list[int], num_partial: int | None = None) -> None:
        """Count - 1 for each block, in eviction order; those reaching 0 rejoin the queue: full
        ones (cached) at the tail, the others at the head in order (`BlockPool.free_blocks`).
        Full: the blocks after the first `num_partial`, or, when it is None, those with a key."""
        shared, key_of, queue = self._shared, self._key, self._queue
        if num_partial is None:
            blocks = sorted(blocks, key=lambda b: key_of[b] is not None)  # stable: keyless first
            num_partial = sum(1 for b in blocks if key_of[b] is None)
        fresh, full = blocks[:num_partial], blocks[num_partial:]
        if shared and not shared.keys().isdisjoint(blocks):  # some stay held by others
            fresh, full = self._unshare(fresh), self._unshare(full)
        is_free = self._is_free
        for part in (full, fresh):  # C-level maps: a request frees ~100 blocks
            list(map(is_free.__setitem__, part, repeat(1)))
        self._num_free += len(full) + len(fresh)
        if self._any_gen:
            n, gen = self.num_blocks, self._gen
            full, fresh = [gen[b] * n + b for b in full], [gen[b] * n + b for b in fresh]
        queue.extend(full)
        queue.extendleft(reversed(fresh))  # prepend keeping their order

    def _unshare(self, blocks: list[int]) -> list[int]:
        """Drop one holder of each block; return those no one holds any more."""
        shared, freed = self._shared, []
        for b in blocks:
            n = shared.get(b)
            if n is None:
                freed.append(b)
            elif n == 1:
                del shared[b]
            else:
                shared[b] = n - 1
        return freed
