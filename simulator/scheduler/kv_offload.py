"""KV offload to host memory behind the GPU prefix cache: the scheduler side of vLLM's native
offloading connector (`--kv-offloading-backend native --kv-offloading-size GiB`).

Read from vLLM's source (the code index holds several snapshots; the semantics below are the
same in each one read):
- `vllm/config/vllm.py` (`_post_init_kv_transfer_config`): `native` becomes the
  `OffloadingConnector` with `cpu_bytes_to_use = kv_offloading_size * (1 << 30)`, one budget
  for all TP ranks together.
- `vllm/v1/kv_offload/cpu.py` (`CPUOffloadingSpec`, snapshot 02fcc61): the tier holds
  `cpu_bytes_to_use // kv_bytes_per_offloaded_block` blocks, a block's bytes being every
  layer's page on every rank (`page_size_bytes * len(kv_cache_tensors) * world_size`); the
  offloaded block is the GPU block (block_size_factor 1, the default); eviction is LRU.
- `vllm/v1/kv_offload/lru_manager.py` (`LRUOffloadingManager`, snapshot 3a04cf8): `lookup`
  counts the leading blocks that are stored and ready; `touch` moves blocks to the MRU end
  (in reverse, so a prefix's first block is the most recent); `prepare_store` skips blocks
  already held, evicts the LRU blocks no load holds (ref count 0) and gives up (stores
  nothing) when too few can be evicted; a block being stored is not ready (not hit, not
  evicted) until `complete_store`; `prepare_load` / `complete_load` hold a block while it is
  read.
- `vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py`
  (`OffloadingConnectorScheduler`, single-file form; `offloading/scheduler.py` at 0072b0b
  splits it out unchanged in these respects):
  - `get_num_new_matched_tokens(request, num_computed_tokens)`: touches every full block of
    the request, then looks up the blocks after the GPU hit; the hit is counted in whole
    blocks after the GPU's, at least one; it is loaded asynchronously (`True`); a hit on a
    block another request is loading defers the request (`None`: asked again next step).
  - `update_state_after_alloc`: `prepare_load` of the hit blocks into the GPU blocks just
    allocated for them; the request's next block to store is the one after them.
  - `_get_reqs_to_store` (each step, in `build_connector_meta`): every scheduled request
    stores the blocks that this step's tokens fill (write-through, by block, not at GPU
    eviction); the worker defers each store job to the start of the next engine step
    (`prepare_store_kv`: "so that offloading starts AFTER transfers related to token
    sampling").
  - `update_connector_output` / worker `get_finished`: a request's stored blocks become
    ready (`complete_store`) once the request has finished and all its store jobs are done
    (a preempted request's at its preemption, `build_connector_meta`); a finished load is
    reported at the end of the step in which it completed.
- `vllm/v1/core/sched/scheduler.py` (`Scheduler.schedule`, loop 2): a request whose load is
  asynchronous takes its GPU blocks now, computes nothing (`num_new_tokens = 0`, no budget),
  is set `WAITING_FOR_REMOTE_KVS` and stays at its place in `waiting`; later loops skip it
  until `_update_waiting_for_remote_kv` sees its load finished, which sets
  `num_computed_tokens` to the loaded blocks' tokens (one less when they cover every token:
  the last is recomputed for its logits) and caches the blocks; it is then scheduled as any
  waiting request with those tokens computed.

Timing (the simulator's part): each direction of the host link is one FIFO transfer stream
(vLLM's CPU-GPU handler copies on its own CUDA stream per direction, overlapped with the
forward pass, `vllm/v1/kv_offload/worker/cpu_gpu.py`), at the device's host-link bandwidth;
a transfer of n blocks takes n × bytes per block (one rank's shard; the ranks copy in
parallel over their own links) / bandwidth. Loads start when they are scheduled, stores at
the end of the step that filled them. Compute is not slowed by the copies.

Not modelled: the wait of a preempted request's unfinished stores (vLLM's worker waits for
them synchronously, `handle_preemptions`), the GPU blocks of a finished request held until
its stores finish (`request_finished` delays their free; here they are freed at once), and
vLLM's optional store filter (`store_threshold`) and ARC policy (`eviction_policy: arc`).
"""
from __future__ import annotations

import heapq
from collections import Counter
from itertools import compress, islice, repeat
from operator import add, floordiv, gt
from dataclasses import dataclass

from simulator.scheduler.prefix_cache import BlockKey, named_tokens
from simulator.scheduler.sequence import Sequence
from traces import Request

_NOT_READY = -1  # a block's ref count while it is being stored (vLLM's BlockStatus before complete_store)
_END_BITS = 24  # a block's end token < 2**24 (max_model_len is far below)


def tier_key(key: BlockKey) -> int:
    """A block's identity (`prefix_cache.block_key`) as one int, for the tier's dicts (an int
    hashes as itself; a tuple is hashed anew at every look-up, the tier's main cost): a
    shared block (hash id h, end token e) is 2 (h 2**24 + e), even; a request's own block
    (request id r, index j) is 2 (r 2**24 + j) + 1, odd. One-to-one while e, j < 2**24."""
    if len(key) == 2:
        return (key[0] << _END_BITS | key[1]) << 1
    return ((key[0] << _END_BITS | key[1]) << 1) | 1



def tier_keys(request: Request, block_size: int, first_block: int, last_block: int) -> list[int]:
    """`tier_key` of each of `block_keys(request, block_size, first_block, last_block)`,
    computed as ints directly (no tuples: this runs for every block a request stores)."""
    ids, size = request.prefix_hash_ids, request.prefix_block_tokens
    shared = min((named_tokens(request) if ids else 0) // block_size, last_block)
    own = request.request_id << _END_BITS
    keys = [(ids[(end - 1) // size] << _END_BITS | end) << 1
            for end in range((first_block + 1) * block_size, shared * block_size + 1, block_size)]
    keys += [((own | j) << 1) | 1 for j in range(max(first_block, shared), last_block)]
    return keys

def _claim(claims: dict, keys) -> None:
    """One more claim on each of `keys` (distinct; `LruTier`), by C-level maps."""
    keys = list(keys)
    claims.update(zip(keys, map(add, map(claims.get, keys, repeat(0)), repeat(1))))


class _Segment:
    """One run of the LRU order (`LruTier`): `keys[:n]`, newest first (a touch: vLLM moves the
    keys to the end in reverse) or oldest first (a store's new keys). `owner`: the request whose
    latest touch it is (None once superseded or forgotten, and for a store). `skip`: entries at
    its old end whose claims are released (an ownerless segment's only)."""

    __slots__ = ("keys", "n", "newest_first", "owner", "skip")

    def __init__(self, keys: list, n: int, newest_first: bool, owner: object):
        self.keys, self.n, self.newest_first, self.owner, self.skip = keys, n, newest_first, owner, 0

    def old_end_first(self, start: int) -> range:
        """Indices into `keys`, LRU first, from the `start`-th."""
        n = self.n
        return range(n - 1 - start, -1, -1) if self.newest_first else range(start, n)


class LruTier:
    """One offload tier of `num_blocks` blocks, LRU (vLLM `LRUOffloadingManager`).

    A block is held as key -> ref count: -1 while it is being stored (not ready), else the
    loads reading it. The LRU order is vLLM's OrderedDict's, held as claims so that a request's
    touch costs O(1 + its new keys), not O(its keys): in vLLM a request touches all its blocks at
    every block it stores, which moved key by key cost O(n^2) a request and more than the rest
    of the simulation. A segment (`_Segment`) is one touch or one store, and claims each key of
    its range; the segments are kept in time order (`_order`, oldest first), and a key sits in
    its latest claiming segment, in that segment's orientation (`order`). A request's next touch
    of the same (growing) key list moves its latest segment to the end and extends it by the new
    keys: every key it claimed moves with it, exactly what vLLM's touch of all its keys does,
    whoever touched them in between. `_claims[key]` counts the segments claiming a key, so a
    walk from the oldest segment knows a key has a later claimer when more claims remain than
    it has passed. Claims of an ownerless segment (a store, a finished or superseded touch) that
    a walk finds void (a later claimer, or the key gone) at its old end are released; a segment
    with none left is dropped. A touch with an owner claims keys not held too, so that when one
    is stored later and then touched again, its owner's segment places it (vLLM: a touch skips
    keys it does not hold; a stored key goes to the end; a later touch moves it).
    """

    def __init__(self, name: str, num_blocks: int):
        if num_blocks < 0:
            raise ValueError(f"{name} tier: num_blocks must be >= 0, got {num_blocks}")
        self.name = name
        self.num_blocks = num_blocks
        self.blocks: dict[BlockKey, int] = {}  # change it through the methods only (`_num_evictable`)
        self._num_evictable = 0  # held, ready blocks no load reads (ref 0): a walk short of them fails at once
        self._claims: dict[BlockKey, int] = {}  # key -> segments in `_order` claiming it
        self._order: dict[_Segment, None] = {}  # oldest first
        self._latest: dict[object, _Segment] = {}  # owner -> its latest touch

    def lookup(self, keys: list[BlockKey]) -> int:
        """Leading `keys` stored and ready."""
        blocks = self.blocks
        hits = 0
        for key in keys:
            ref = blocks.get(key)
            if ref is None or ref == _NOT_READY:
                break
            hits += 1
        return hits

    def touch(self, keys: list[BlockKey], n: int | None = None, owner: object = None) -> None:
        """Move the held keys of `keys[:n]` to the MRU end, the first last (the most recent:
        vLLM `touch` moves them in reverse). `owner` (a request) passes the same live list,
        grown, at each of its touches: a touch covering its previous one moves that segment."""
        n = len(keys) if n is None else n
        order = self._order
        seg = self._latest.get(owner) if owner is not None else None
        if seg is not None and seg.keys is keys and seg.n <= n:
            del order[seg]
            order[seg] = None
            if n > seg.n:
                _claim(self._claims, islice(keys, seg.n, n))
                seg.n = n
            return
        if seg is not None:
            seg.owner = None  # superseded: its claims stay until a walk finds them void
        seg = _Segment(keys, n, True, owner)
        _claim(self._claims, islice(keys, n))
        order[seg] = None
        if owner is not None:
            self._latest[owner] = seg

    def forget(self, owner: object) -> None:
        """`owner` touches no more (a finished request)."""
        seg = self._latest.pop(owner, None)
        if seg is not None:
            seg.owner = None

    def order(self) -> list[BlockKey]:
        """The held keys, LRU first (vLLM's OrderedDict order)."""
        claims, blocks, passed = self._claims, self.blocks, Counter()
        out = []
        for seg in self._order:
            keys = seg.keys
            for i in seg.old_end_first(seg.skip):
                key = keys[i]
                passed[key] += 1
                if passed[key] == claims[key] and key in blocks:
                    out.append(key)
        return out

    def _victims(self, count: int) -> list[BlockKey] | None:
        """The `count` LRU-first keys with no reader (ref 0), or None when fewer exist (vLLM
        `prepare_store`'s walk). Releases the void claims it finds at ownerless segments' old
        ends (a bookkeeping change only) and drops the segments left with none."""
        claims, blocks, order = self._claims, self.blocks, self._order
        passed: dict[BlockKey, int] = {}
        victims, emptied = [], []
        for seg in order:
            keys, releasing = seg.keys, seg.owner is None
            for i in seg.old_end_first(seg.skip):
                key = keys[i]
                seen = passed.get(key, 0)
                here = claims[key] == seen + 1  # no later claimer
                if releasing and not (here and key in blocks):  # void here: release
                    seg.skip += 1
                    if claims[key] == 1:
                        del claims[key]
                    else:
                        claims[key] -= 1
                    continue
                releasing = False
                passed[key] = seen + 1
                if here and blocks.get(key) == 0:
                    victims.append(key)
                    if len(victims) == count:
                        break
            if seg.owner is None and seg.skip == seg.n:
                emptied.append(seg)
            if len(victims) == count:
                break
        for seg in emptied:
            del order[seg]
        if len(victims) < count:
            raise RuntimeError(f"{self.name} tier: {self._num_evictable} evictable blocks counted, {len(victims)} found")
        return victims

    def prepare_load(self, keys: list[BlockKey]) -> None:
        """A load reads `keys` (held and ready): not evictable until `complete_load`."""
        blocks = self.blocks
        for key in keys:
            ref = blocks[key]
            if ref == 0:
                self._num_evictable -= 1
            blocks[key] = ref + 1

    def complete_load(self, keys: list[BlockKey]) -> None:
        blocks = self.blocks
        for key in keys:
            ref = blocks.get(key, 0)
            if ref > 0:
                blocks[key] = ref - 1
                if ref == 1:
                    self._num_evictable += 1

    def prepare_store(self, keys: list[BlockKey], touched_after: bool = False) -> list[BlockKey] | None:
        """Allocate the `keys` not held yet (not ready until `complete_store`), evicting LRU
        blocks with no reader; None (nothing changed) when too few can be evicted.
        `touched_after`: the caller touches them all next, with nothing in between (the
        connector's store: a request touches all its blocks after storing), so they are not
        placed here (the touch places them; a store's segment would be void at once)."""
        blocks = self.blocks
        new = [key for key in keys if key not in blocks]
        excess = len(blocks) + len(new) - self.num_blocks
        if excess > 0:
            victims = self._victims(excess) if excess <= self._num_evictable else None
            if victims is None:
                return None
            for key in victims:
                del blocks[key]
            self._num_evictable -= excess
        if new:
            blocks.update(zip(new, repeat(_NOT_READY)))
            if not touched_after:
                _claim(self._claims, new)
                self._order[_Segment(new, len(new), False, None)] = None
        return new

    def complete_store(self, keys: list[BlockKey]) -> None:
        blocks = self.blocks
        for key in keys:
            if blocks.get(key) == _NOT_READY:
                blocks[key] = 0
                self._num_evictable += 1


@dataclass
class OffloadStats:
    """Counters of one replica's offload tier (bytes as the host link moves them: one rank's
    shard per block, `KvOffload.bytes_per_block`)."""

    loads: int = 0
    load_blocks: int = 0
    load_bytes: int = 0  # host -> GPU
    store_blocks: int = 0
    store_bytes: int = 0  # GPU -> host
    stores_skipped_blocks: int = 0  # a full tier with every block held by a load: vLLM skips the store


class KvOffload:
    """The offloading connector of one replica's scheduler (module docstring).

    Args:
        cpu_blocks: blocks the CPU tier holds (`offload_blocks`).
        block_size: tokens per block (the GPU's).
        bytes_per_block: bytes one rank moves per block over its host link.
        h2d_bytes_per_s, d2h_bytes_per_s: host-link bandwidth per direction (bytes/s).

    Raises:
        ValueError: a bandwidth that is not positive, a negative size.
    """

    def __init__(self, cpu_blocks: int, block_size: int, bytes_per_block: float, h2d_bytes_per_s: float,
                 d2h_bytes_per_s: float):
        if not (h2d_bytes_per_s > 0 and d2h_bytes_per_s > 0):
            raise ValueError(f"host-link bandwidth must be > 0, got {h2d_bytes_per_s}, {d2h_bytes_per_s}")
        if bytes_per_block <= 0:
            raise ValueError(f"bytes_per_block must be > 0, got {bytes_per_block}")
        self.cpu = LruTier("cpu", cpu_blocks)
        self.block_size = block_size
        self.bytes_per_block = bytes_per_block
        self.load_s_per_block = bytes_per_block / h2d_bytes_per_s
        self.store_s_per_block = bytes_per_block / d2h_bytes_per_s
        self.stats = OffloadStats()
        self._h2d_free_s = 0.0  # when the host->GPU stream has no transfer queued
        self._d2h_free_s = 0.0
        self.stored_blocks: dict[int, int] = {}  # request id -> blocks stored so far (the next to store)
        self._unsubmitted: list[tuple[int, list[BlockKey]]] = []  # stores of the last step, submitted at the next
        self._storing: dict[int, tuple[list[BlockKey], float]] = {}  # request id -> (keys stored, last job's end)
        self._ready: list[tuple[float, int, list[BlockKey]]] = []  # heap of (time, seq no., keys) to complete
        self._counter = 0
        self.loading: dict[int, tuple[float, int, list[BlockKey]]] = {}  # request id -> (done at, hit tokens, keys)
        self._keys: dict[int, list[BlockKey]] = {}  # request id -> its blocks' keys so far (`_keys_of`)
        self._being_loaded: dict[BlockKey, int] = {}  # key -> loads reading it

    # ----- time ---------------------------------------------------------------------------
    def poll(self, now_s: float) -> None:
        """What vLLM learns at a step's end (`update_connector_output`): stores whose request
        finished and whose transfers are done by `now_s` become ready; last step's store jobs
        are submitted now (the next step starts)."""
        if self._unsubmitted:
            self._submit_stores(now_s)
        ready = self._ready
        while ready and ready[0][0] <= now_s:
            _, _, keys = heapq.heappop(ready)
            self.cpu.complete_store(keys)

    def next_load_done_s(self) -> float:
        """The earliest time a load now in flight is done (inf with none)."""
        return min((done for done, _, _ in self.loading.values()), default=float("inf"))

    def _submit_stores(self, now_s: float) -> None:
        for rid, keys in self._unsubmitted:
            start = max(now_s, self._d2h_free_s)
            end = self._d2h_free_s = start + len(keys) * self.store_s_per_block
            stored, _ = self._storing.get(rid, ([], 0.0))
            stored += keys
            self._storing[rid] = (stored, end)
            self.stats.store_blocks += len(keys)
            self.stats.store_bytes += round(len(keys) * self.bytes_per_block)
        self._unsubmitted = []

    def _keys_of(self, seq: Sequence, num_blocks: int) -> list[BlockKey]:
        """The keys of `seq`'s blocks, at least its first `num_blocks` (`tier_keys`, kept per
        request and extended as it grows: the live list, never shorten it)."""
        keys = self._keys.get(seq.request_id)
        if keys is None:  # all its blocks at once: a request's token count is known (prompt + output)
            request = seq.request
            keys = self._keys[seq.request_id] = tier_keys(
                request, self.block_size, 0, max(num_blocks, (request.prompt_tokens + request.output_tokens) // self.block_size))
        elif len(keys) < num_blocks:
            keys += tier_keys(seq.request, self.block_size, len(keys), num_blocks)
        return keys

    # ----- admission ------------------------------------------------------------------------
    def match(self, seq: Sequence, gpu_hit_blocks: int) -> tuple[int, list[BlockKey]] | None:
        """`get_num_new_matched_tokens`: (blocks hit after the GPU's `gpu_hit_blocks`, their keys),
        (0, []) for none, None when a hit block is being loaded by another request (ask again
        next step). Touches the request's full blocks in the tier (LRU)."""
        size = self.block_size
        full = seq.num_tokens // size
        if full - gpu_hit_blocks < 1:
            return 0, []
        keys = self._keys_of(seq, full)
        self.cpu.touch(keys, full, seq.request_id)
        tail = keys[gpu_hit_blocks:full]
        hits = self.cpu.lookup(tail)
        if not hits:
            return 0, []
        hit_keys = tail[:hits]
        if self._being_loaded and any(key in self._being_loaded for key in hit_keys):
            return None
        return hits, hit_keys

    def num_hit_blocks(self, request: Request, gpu_hit_blocks: int) -> int:
        """Blocks of `request`'s prompt after its `gpu_hit_blocks` GPU hit that the tier holds
        ready now, as `match` would count them, capped as the GPU hit is (the last prompt token is
        computed). Read-only (no touch): for a router (`simulator.router`)."""
        last = (request.prompt_tokens - 1) // self.block_size
        if last <= gpu_hit_blocks:
            return 0
        return self.cpu.lookup(tier_keys(request, self.block_size, gpu_hit_blocks, last))

    def start_load(self, seq: Sequence, keys: list[BlockKey], loaded_tokens: int, now_s: float) -> float:
        """`update_state_after_alloc`: read `keys` into the GPU blocks just allocated; the
        request's KV will cover `loaded_tokens` once done. Returns when the load is done."""
        self.cpu.prepare_load(keys)
        for key in keys:
            self._being_loaded[key] = self._being_loaded.get(key, 0) + 1
        start = max(now_s, self._h2d_free_s)
        done = self._h2d_free_s = start + len(keys) * self.load_s_per_block
        rid = seq.request_id
        self.loading[rid] = (done, loaded_tokens, keys)
        self.stored_blocks[rid] = loaded_tokens // self.block_size
        stats = self.stats
        stats.loads += 1
        stats.load_blocks += len(keys)
        stats.load_bytes += round(len(keys) * self.bytes_per_block)
        return done

    def finish_load(self, request_id: int) -> int:
        """The load of `request_id` is seen done (`complete_load`); returns its loaded tokens."""
        _, tokens, keys = self.loading.pop(request_id)
        self.cpu.complete_load(keys)
        being = self._being_loaded
        for key in keys:
            n = being[key] - 1
            if n:
                being[key] = n
            else:
                del being[key]
        return tokens

    # ----- stores ---------------------------------------------------------------------------
    def note_step(self, seqs: list[Sequence], ids: list[int], contexts: list[int], queries: list[int]) -> None:
        """`note_scheduled` for each of a step's scheduled sequences (plan columns: request ids,
        computed tokens before the step, tokens it computes) that fills a block, in plan order
        (C-level maps: this runs every step over every scheduled sequence, and few fill one)."""
        reach = list(map(add, contexts, queries))
        fills = map(gt, map(floordiv, reach, repeat(self.block_size)), map(self.stored_blocks.get, ids, repeat(0)))
        for i in compress(range(len(ids)), fills):
            self.note_scheduled(seqs[i], reach[i])

    def note_scheduled(self, seq: Sequence, num_tokens_after: int) -> None:
        """`_get_reqs_to_store` for one scheduled request that will hold `num_tokens_after`
        computed tokens after this step: the blocks they fill are stored (submitted at the
        next step's start, `poll`)."""
        size = self.block_size
        full = num_tokens_after // size
        rid = seq.request_id
        start = self.stored_blocks.get(rid, 0)
        if full <= start:
            return
        keys = self._keys_of(seq, full)
        new = self.cpu.prepare_store(keys[start:full], touched_after=True)
        if new is None:
            self.stats.stores_skipped_blocks += full - start
            return  # vLLM logs "cannot store" and tries again at the next step
        self.stored_blocks[rid] = full
        if new:
            self.cpu.touch(keys, full, rid)
            self._unsubmitted.append((rid, new))

    def request_done(self, request_id: int, now_s: float, finished: bool = True) -> None:
        """The request finished or (not `finished`) was preempted: its stored blocks become
        ready once its store jobs are done (finished: the worker's `finished_sending`;
        preempted: `build_connector_meta` completes them at once, as the worker waits for the
        jobs). A preempted request keeps its next block to store (vLLM resets only its block
        ids), so blocks it stored are not stored again when it is recomputed."""
        if finished:
            self.stored_blocks.pop(request_id, None)
        self._keys.pop(request_id, None)
        self.cpu.forget(request_id)
        if any(rid == request_id for rid, _ in self._unsubmitted):
            self._submit_stores(now_s)  # its last step's stores: submitted as the next step starts
        entry = self._storing.pop(request_id, None)
        if entry is not None:
            keys, end = entry
            self._counter += 1
            heapq.heappush(self._ready, (max(now_s, end), self._counter, keys))


def offload_blocks(tier_bytes: float, bytes_per_block_all_ranks: float) -> int:
    """Blocks a tier of `tier_bytes` holds: floor(bytes / a block's bytes over every layer and
    rank) (vLLM `CPUOFfloadingSpec`: `cpu_bytes_to_use // kv_bytes_per_offloaded_block`).

    Raises:
        ValueError: a negative size or a block of no bytes.
    """
    if tier_bytes < 0:
        raise ValueError(f"tier size must be >= 0 bytes, got {tier_bytes}")
    if bytes_per_block_all_ranks <= 0:
        raise ValueError(f"a block's bytes must be > 0, got {bytes_per_block_all_ranks}")
    return int(tier_bytes // bytes_per_block_all_ranks)
