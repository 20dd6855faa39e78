"""A finite pool of prompts, as benchmark clients build it: G groups of U prompts, each prompt a
group's shared system prompt followed by its own question, sent again and again.

inference-perf's `shared_prefix` data generator (kubernetes-sigs/inference-perf 7de5ef2,
`inference_perf/datagen/synthetic/shared_prefix_datagen.py`): `num_groups` system prompts of
`system_prompt_len` tokens, `num_prompts_per_group` questions of `question_len` tokens per group,
an `output_len` per prompt; the G × U prompts are shuffled once (`rng.permutation`) and request i
sends prompt `i % len(prompts)` (`load_lazy_data`), the cycle starting again at each stage
(`run_stage` calls `get_data()` afresh). vLLM's `prefix_repetition` dataset
(`vllm/benchmarks/datasets.py` `PrefixRepetitionRandomDataset`) is one group per prefix whose
suffixes are all different (U = num_requests / num_prefixes, no repeat): `traces.shared_prefix`.

Token identity (`Request.prefix_hash_ids`, 16-token blocks as `traces.shared_prefix`): block b
of prompt p (group g) lies wholly in the system prompt when (b + 1) × 16 <= S and is then named
by group g's chain, else by prompt p's own chain; every block of the prompt is named, the last
partial one over its prompt tokens only, so a repeated prompt hits every full KV block but the
one holding its last token, and a new prompt of a seen group hits its group's full blocks, as
vLLM's chained block hashes do (`simulator.scheduler.prefix_cache`). Exact for any KV block size
that is a multiple of 16 (vLLM's CUDA default is 16); a smaller block would see a block that
ends inside the system prompt's last 16 tokens as the prompt's own, so `check_block_size` refuses it.

Orders: `cycle` sends prompt i mod (G × U) in pool order (group-major: prompt p is group p // U);
`shuffled_cycle` shuffles the pool once (seeded) and cycles it, as inference-perf does; `random`
draws each request's prompt uniformly from the pool (seeded).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traces.arrivals import check_count
from traces.length_distributions import LengthDistribution, length_distribution
from traces.shared_prefix import BLOCKS_PER_STREAM, GENERATED_BLOCK_TOKENS

POOL_ID_BASE = 3 * 10**14  # after traces.shared_prefix's PREFIX_ID_BASE and SESSION_ID_BASE
ORDERS = ("cycle", "shuffled_cycle", "random")
# Prompts a pool may hold: each keeps its id tuple, so a pool of 10 M prompts of 2k tokens would
# hold 1.3 G ids; far beyond any benchmark client's list.
MAX_POOL_PROMPTS = 1_000_000


@dataclass(frozen=True)
class PromptPool:
    """G × U prompts with their lengths and token identity (module docstring).

    Args (fields):
        groups: G, system prompts, >= 1.
        per_group: U, prompts per system prompt, >= 1.
        system_tokens, question_tokens: length specs (`traces.length_distributions`): an int, a
            [low, high] pair or {dist: ...}; the system length is drawn once per group, the
            question length once per prompt (inference-perf draws them so).
        output_tokens: length spec of each prompt's output, drawn once per prompt (its
            `max_tokens`, the same every time the prompt is sent, as inference-perf's `output_len`).
        order: "cycle", "shuffled_cycle" or "random".
        seed: seeds the length draws and the order.

    Raises:
        ValueError: a count < 1 or above MAX_POOL_PROMPTS, a bad length spec, or an unknown order.
    """

    groups: int
    per_group: int
    system_tokens: object = 0
    question_tokens: object = 64
    output_tokens: object = 128
    order: str = "cycle"
    seed: int = 0
    _prompts: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("groups", "per_group"):
            value = getattr(self, name)
            check_count(value, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.groups * self.per_group > MAX_POOL_PROMPTS:
            raise ValueError(f"a pool of {self.groups} x {self.per_group} prompts is more than the "
                             f"{MAX_POOL_PROMPTS:,} a pool may hold")
        if self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}; valid: {', '.join(ORDERS)}")
        object.__setattr__(self, "_prompts", self._build())

    @property
    def size(self) -> int:
        """G × U."""
        return self.groups * self.per_group

    def _build(self) -> tuple:
        rng = np.random.default_rng([self.seed, 0x9001])
        system = _lengths(self.system_tokens, "system", self.groups, rng, minimum=0)
        question = _lengths(self.question_tokens, "question", self.size, rng)
        output = length_distribution(self.output_tokens, "output").sample(self.size, rng)
        prompts = []
        for p in range(self.size):
            g = p // self.per_group
            s, q = int(system[g]), int(question[p])
            prompts.append((s + q, int(output[p]), _pool_ids(g, p, self.groups, s, s + q)))
        return tuple(prompts)

    def prompt(self, index: int) -> tuple[int, int, tuple[int, ...]]:
        """(prompt_tokens, output_tokens, prefix_hash_ids) of pool prompt `index` (group index // U)."""
        return self._prompts[index]

    def assignment(self, num_requests: int, restarts: np.ndarray | None = None) -> np.ndarray:
        """Pool index of each of `num_requests` requests, shape (n,) int64 (module docstring).

        `restarts`: request indices at which the cycle starts again from its first prompt
        (inference-perf restarts it at each stage); None: one cycle through the whole run.
        """
        check_count(num_requests)
        rng = np.random.default_rng([self.seed, 0x0DE5])
        if self.order == "random":
            return rng.integers(0, self.size, num_requests)
        pool_order = rng.permutation(self.size) if self.order == "shuffled_cycle" else np.arange(self.size)
        position = np.arange(num_requests, dtype=np.int64)
        if restarts is not None and len(restarts):
            starts = np.zeros(num_requests, dtype=np.int64)
            starts[np.asarray(restarts, dtype=np.int64)] = np.asarray(restarts, dtype=np.int64)
            position = position - np.maximum.accumulate(starts)
        return pool_order[position % self.size]

    def columns(self, assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
        """(prompt_tokens, output_tokens, prefix_hash_ids) of the requests `assignment` names;
        the id tuples are the pool's own objects, shared by every request of a prompt."""
        chosen = [self._prompts[i] for i in assignment.tolist()]
        return (np.fromiter((c[0] for c in chosen), dtype=np.int64, count=len(chosen)),
                np.fromiter((c[1] for c in chosen), dtype=np.int64, count=len(chosen)),
                [c[2] for c in chosen])


def _lengths(spec, field_name: str, n: int, rng: np.random.Generator, minimum: int = 1) -> np.ndarray:
    """n lengths from a spec; a system prompt may be 0 tokens (an int 0: no shared prefix)."""
    if minimum == 0 and isinstance(spec, int) and not isinstance(spec, bool) and spec == 0:
        return np.zeros(n, dtype=np.int64)
    dist: LengthDistribution = length_distribution(spec, field_name)
    return dist.sample(n, rng)


def _pool_ids(group: int, prompt: int, groups: int, system_tokens: int, prompt_tokens: int) -> tuple[int, ...]:
    """Ids of every 16-token block of a pool prompt: group chain while the block is wholly system
    prompt, then the prompt's own chain (module docstring)."""
    size = GENERATED_BLOCK_TOKENS
    blocks = -(-prompt_tokens // size)
    shared = system_tokens // size
    group_base = POOL_ID_BASE + group * BLOCKS_PER_STREAM
    own_base = POOL_ID_BASE + (groups + prompt) * BLOCKS_PER_STREAM
    return tuple(range(group_base, group_base + shared)) + tuple(range(own_base + shared, own_base + blocks))


def check_block_size(block_size: int) -> None:
    """ValueError unless a KV block of `block_size` tokens sees pool identity exactly (a multiple of 16)."""
    if block_size % GENERATED_BLOCK_TOKENS:
        raise ValueError(f"a prompt pool names {GENERATED_BLOCK_TOKENS}-token blocks; engine.block_size {block_size} "
                         f"is not a multiple of {GENERATED_BLOCK_TOKENS}, so some prefix-cache hits would be wrong")
