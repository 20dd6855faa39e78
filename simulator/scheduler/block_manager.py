"""Paged KV-cache block manager: hands out physical block ids (vLLM's PagedAttention layout)."""
from __future__ import annotations

from collections import deque
from itertools import repeat, starmap

_EMPTY: list[int] = []


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold `num_tokens` KV entries: ceil(num_tokens / block_size).

    Blocks are always counted on the total reserved, never per chunk (a 250-token prompt in chunks
    of 100, 100, 50 holds 16 blocks of 16 tokens, not 7 + 7 + 4).
    """
    return -(-num_tokens // block_size)


class BlockTables:
    """The block tables of a plan's request ids (a `PlanColumns.block_tables` column), looked
    up when first read rather than every step: the simulator never reads them, the engine
    does. The tables are the manager's live lists, so a late look-up gives the same lists as
    an early one until a request's table is dropped; the manager hands the latest column each
    table it drops (`keep`, at a finish or preemption), so reading it before the next
    `schedule()` call gives what an eager look-up gave. A read-only sequence of lists."""

    __slots__ = ("_tables", "_ids", "_lists", "_dropped")

    def __init__(self, tables: dict[int, list[int]], request_ids: list[int]):
        self._tables, self._ids, self._lists = tables, request_ids, None
        self._dropped: dict[int, list[int]] | None = None  # tables dropped since, by request id

    def keep(self, request_id: int, table: list[int] | None) -> None:
        """`request_id`'s table (None: it has none) is about to leave the manager."""
        if table is not None and self._lists is None:
            if self._dropped is None:
                self._dropped = {}
            self._dropped.setdefault(request_id, table)  # the first one: the table the plan ran with

    def pin(self) -> list[list[int]]:
        """The tables as a list, looked up now if not yet."""
        if self._lists is None:
            lists = list(map(self._tables.get, self._ids, repeat(_EMPTY)))
            if self._dropped:
                dropped = self._dropped
                lists = [dropped.get(rid, table) for rid, table in zip(self._ids, lists)]
            self._lists, self._dropped = lists, None
        return self._lists

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self):
        return iter(self.pin())

    def __getitem__(self, index):
        return self.pin()[index]

    def __eq__(self, other: object) -> bool:
        return self.pin() == (other.pin() if isinstance(other, BlockTables) else other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self.pin())


class BlockManager:
    """Owns the KV pool of one replica: `num_blocks` physical blocks of `block_size` tokens.

    Admission keeps a watermark of free blocks back (Sarathi-Serve and vLLM v0 use 1 % of the pool,
    `sarathi/core/block_space_manager`), so a newly admitted prompt cannot take the blocks that
    running decodes are about to need. Growth of running sequences may use the watermark.

    The usable pool (the largest request that can ever be admitted alone) is
    `num_blocks - watermark_blocks` with `watermark_blocks = floor(watermark_fraction * num_blocks)`.
    """

    def __init__(self, num_blocks: int, block_size: int, watermark_fraction: float = 0.01):
        if num_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_blocks = int(watermark_fraction * num_blocks)
        self._free: deque[int] = deque(range(num_blocks))
        self._tables: dict[int, list[int]] = {}
        self._unpinned: BlockTables | None = None  # the latest `block_tables_column`, not looked up yet

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usable_blocks(self) -> int:
        """Largest number of blocks one request may ever need and still be served."""
        return self.num_blocks - self.watermark_blocks

    def blocks_held(self, request_id: int) -> int:
        return len(self._tables.get(request_id, ()))

    def blocks_held_each(self, request_ids: list[int]) -> list[int]:
        """`blocks_held` of each request id, in order (C-level passes: the decode windows' check)."""
        return list(map(len, map(self._tables.get, request_ids, repeat(_EMPTY))))

    def block_table(self, request_id: int) -> list[int]:
        """The live list of physical block ids of `request_id` (do not modify it)."""
        return self._tables.get(request_id, _EMPTY)

    def block_tables(self, request_ids: list[int]) -> list[list[int]]:
        """`block_table` of each request id, in order (one call per step instead of one per sequence)."""
        return list(map(self._tables.get, request_ids, repeat(_EMPTY)))

    def block_tables_column(self, request_ids: list[int]) -> BlockTables:
        """`block_tables(request_ids)`, looked up when first read (`BlockTables`); the
        previous column is no longer pinned (read a plan's tables before the next one)."""
        column = self._unpinned = BlockTables(self._tables, request_ids)
        return column

    def forget_block_tables(self) -> None:
        """The latest `block_tables_column` will not be read again: no need to pin it (a decode
        window, which runs only after the last plan completed)."""
        self._unpinned = None

    def _keep_table(self, request_id: int) -> None:
        """Hand the latest column `request_id`'s table before it is dropped (`BlockTables.keep`)."""
        self._unpinned.keep(request_id, self._tables.get(request_id))

    def try_grow_to(self, request_id: int, num_tokens: int) -> bool:
        """Reserve blocks so `request_id` holds `num_tokens`; False (nothing changed) if too few are free.

        The common case — the tokens fit in the blocks already held — costs one comparison.
        """
        table = self._tables.get(request_id, _EMPTY)
        extra = -(-num_tokens // self.block_size) - len(table)
        if extra <= 0:
            return True
        if extra > self.num_free:
            return False
        self.grow_to(request_id, num_tokens)
        return True

    def capacity_tokens(self, request_id: int) -> int:
        """Most KV tokens `request_id` could hold now: its blocks plus every free one."""
        return (self.blocks_held(request_id) + self.num_free) * self.block_size

    def can_admit(self, num_tokens: int) -> bool:
        """True if a new sequence can reserve `num_tokens` and leave the watermark free."""
        return self.num_free - blocks_for(num_tokens, self.block_size) >= self.watermark_blocks

    def can_grow_to(self, request_id: int, num_tokens: int) -> bool:
        """True if `request_id` can hold `num_tokens` with the blocks that are free now."""
        return self._extra_blocks(request_id, num_tokens) <= self.num_free

    def grow_to(self, request_id: int, num_tokens: int) -> None:
        """Reserve blocks so `request_id` holds ceil(num_tokens / block_size) blocks.

        Raises:
            RuntimeError: not enough free blocks (callers check `can_grow_to` / `can_admit` first).
        """
        table = self._tables.setdefault(request_id, [])
        extra = -(-num_tokens // self.block_size) - len(table)
        if extra <= 0:
            return
        free = self._free
        if extra > len(free):
            raise RuntimeError(
                f"KV pool exhausted: request {request_id} needs {extra} more blocks, {len(free)} free"
            )
        if extra == 1:  # a decode's next block: the common case
            table.append(free.popleft())
        else:
            table.extend(starmap(free.popleft, repeat((), extra)))  # `extra` poplefts at C level

    def shrink_to(self, request_id: int, num_tokens: int) -> None:
        """Release blocks beyond ceil(num_tokens / block_size) (rejected speculative slots)."""
        table = self._tables.get(request_id, [])
        keep = blocks_for(num_tokens, self.block_size)
        while len(table) > keep:
            self._free.append(table.pop())

    def free(self, request_id: int) -> None:
        """Return all blocks of `request_id` to the pool (finish or preemption)."""
        if self._unpinned is not None:
            self._keep_table(request_id)
        self._free.extend(self._tables.pop(request_id, ()))

    def _extra_blocks(self, request_id: int, num_tokens: int) -> int:
        return max(0, blocks_for(num_tokens, self.block_size) - self.blocks_held(request_id))
