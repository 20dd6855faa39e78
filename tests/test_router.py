"""Routers across replicas: Dynamo's KV-router cost (prefix_aware) and sticky sessions, worked by hand."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from simulator.router import Router
from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.scheduler.prefix_cache import PrefixCachingBlockManager
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request
from traces.sessions import SessionWorkload


def _replica(num_blocks: int = 100) -> SimpleNamespace:
    """What the router reads of a replica: its scheduler's block manager and waiting queue."""
    scheduler = SimpleNamespace(block_manager=PrefixCachingBlockManager(num_blocks, 16), waiting=[], running=[])
    return SimpleNamespace(scheduler=scheduler, num_outstanding=0)


def _cache_stream(bm: PrefixCachingBlockManager, request: Request, num_tokens: int) -> None:
    """Compute `num_tokens` of `request` on `bm`, register its full blocks, then free them (they stay cached)."""
    bm.grow_to(request.request_id, num_tokens)
    bm.cache_blocks(request.request_id, num_tokens, request)
    bm.free(request.request_id)


IDS = (11, 12, 13, 14, 15)  # 16-token blocks of one stream


def test_prefix_aware_cost_is_uncached_prompt_blocks_plus_active_blocks():
    replicas = [_replica(), _replica()]
    # Replica 0 caches 4 full blocks (64 tokens) of the stream.
    _cache_stream(replicas[0].scheduler.block_manager, Request(0, 0.0, 70, 1, prefix_hash_ids=IDS, prefix_block_tokens=16), 64)
    # The new request: a 60-token prompt on the same stream, 4 prompt blocks; admission would
    # hit at most (60 - 1) // 16 = 3 of them (the last prompt token is always computed).
    request = Request(1, 1.0, 60, 5, prefix_hash_ids=IDS, prefix_block_tokens=16)
    bm0 = replicas[0].scheduler.block_manager
    assert bm0.num_cached_prefix_blocks(request) == 3
    assert bm0.num_used == 0 and bm0.num_free == 100  # cached free blocks count as free
    router = Router("prefix_aware", replicas)
    assert [router.prefix_cost(i, request) for i in (0, 1)] == [1.0, 4.0]  # 1 x (4 - 3) + 0, 1 x 4 + 0
    assert router.pick(request) == 0
    # Load on replica 0: 10 blocks held by a running request, one waiting 33-token prompt (3 blocks).
    bm0.grow_to(7, 160)
    replicas[0].scheduler.waiting.append(SimpleNamespace(request=Request(8, 0.0, 33, 1)))
    assert router.prefix_cost(0, request) == 1 + 10 + 3
    assert router.pick(request) == 1  # 4 < 14: load wins
    heavy = Router("prefix_aware", replicas, overlap_weight=8.0)
    assert [heavy.prefix_cost(i, request) for i in (0, 1)] == [8 + 13, 32.0]
    assert heavy.pick(request) == 0  # the cache wins
    assert Router("prefix_aware", replicas, overlap_weight=0.0).pick(request) == 1  # load only
    assert bm0.num_cached_prefix_blocks(request) == 3 and bm0.num_used == 10  # the query changed nothing


def test_prefix_aware_breaks_ties_by_replica_index():
    replicas = [_replica(), _replica(), _replica()]
    router = Router("prefix_aware", replicas)
    assert router.pick(Request(0, 0.0, 40, 1)) == 0
    replicas[0].scheduler.block_manager.grow_to(3, 16)  # 1 block on replica 0: replicas 1 and 2 tie
    assert router.pick(Request(1, 0.0, 40, 1)) == 1


def test_session_affinity_keeps_a_conversation_on_its_first_replica():
    replicas = [SimpleNamespace(num_outstanding=n) for n in (2, 0, 0)]
    session_of = {0: 5, 1: 6, 2: 5, 3: 6, 4: 7}.__getitem__
    router = Router("session_affinity", replicas, session_of=session_of)
    picks = []
    for request_id in range(5):
        index = router.pick(Request(request_id, 0.0, 10, 1))
        picks.append(index)
        replicas[index].num_outstanding += 1
    # Outstanding (2, 0, 0): session 5 starts on replica 1 (lowest index of the fewest); then
    # (2, 1, 0): session 6 on replica 2; session 5's and 6's next turns stick to 1 and 2 even
    # though they then tie with replica 0 at 2; session 7 finds (2, 2, 2): replica 0.
    assert picks == [1, 2, 1, 2, 0]


def test_router_errors_name_what_is_missing():
    with pytest.raises(ValueError, match="needs requests that belong to conversations"):
        Router("session_affinity", [SimpleNamespace(num_outstanding=0)])
    with pytest.raises(ValueError, match="unknown router 'sticky'; valid: .*prefix_aware, session_affinity"):
        Router("sticky", [])
    with pytest.raises(ValueError, match="overlap_weight must be a finite number >= 0"):
        Router("prefix_aware", [], overlap_weight=-1.0)
    with pytest.raises(ValueError, match="router prefix_aware needs the request"):
        Router("prefix_aware", [_replica(), _replica()]).pick()


def _one_conversation_on_two_replicas(router: str):
    # One conversation, two turns of 20 user + 10 answer tokens, block size 16. Turn 0 computes
    # 20 + 10 - 1 = 29 tokens: 1 full block. Turn 1 (prompt 50) can hit that block (16 tokens)
    # only on the replica that served turn 0.
    workload = SessionWorkload(1, 2, think_time_s=1.0, user_tokens=20, output_tokens=10)
    schedulers = [make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=100, max_model_len=1024, chunk_size=512))
                  for _ in range(2)]
    return simulate(workload, schedulers, ConstantCostModel(0.01), router=router)


@pytest.mark.parametrize("router, replica_ids, cached", [
    ("round_robin", [0, 1], [0, 0]),        # turn 1 lands on the other replica: nothing cached there
    ("session_affinity", [0, 0], [0, 16]),
    ("prefix_aware", [0, 0], [0, 16]),      # costs 1 x (4 - 1) + 0 = 3 on replica 0 against 4
])
def test_routers_on_a_conversation(router, replica_ids, cached):
    frame = _one_conversation_on_two_replicas(router).requests.sort_values("request_id")
    assert frame["prompt_tokens"].tolist() == [20, 50]
    assert frame["replica_id"].tolist() == replica_ids
    assert frame["cached_tokens"].tolist() == cached


def test_sessions_routing_is_deterministic_and_sticky():
    def run(router):
        workload = SessionWorkload(12, 4, think_time_s=0.2, user_tokens=[20, 200], output_tokens=[10, 100],
                                   shared_prefix_tokens=64, num_prefixes=2, seed=3, session_qps=20.0)
        schedulers = [make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=400, max_model_len=4096,
                                                                chunk_size=512)) for _ in range(3)]
        result = simulate(workload, schedulers, ConstantCostModel(0.01), router=router)
        return result, workload

    for router in ("prefix_aware", "session_affinity"):
        (first, workload), (second, _) = run(router), run(router)
        assert first.requests.equals(second.requests) and first.summary == second.summary
    result, workload = run("session_affinity")
    per_session = result.requests.groupby(result.requests["request_id"].map(workload.session_of))["replica_id"]
    assert (per_session.nunique() == 1).all() and len(per_session) == 12


def test_config_checks_what_each_router_needs():
    from experiments.config import SweepConfig
    sessions = {"kind": "sessions", "clients": 2, "turns": 2, "prompt_tokens": 20, "output_tokens": 10}
    v1 = {"scheduler": "vllm_v1", "chunk_size": 512, "replicas": 2}
    assert SweepConfig(trace=sessions, engine={**v1, "router": "session_affinity"}).engine.router == "session_affinity"
    config = SweepConfig(trace=sessions, engine={**v1, "router": "prefix_aware", "router_overlap_weight": 4})
    assert config.engine.router_overlap_weight == 4.0
    with pytest.raises(ValueError, match="session_affinity .* needs trace kind sessions \\(got kind 'synthetic'"):
        SweepConfig(trace={"kind": "synthetic", "qps": 1, "prompt_tokens": 10, "output_tokens": 10},
                    engine={**v1, "router": "session_affinity"})
    with pytest.raises(ValueError, match="prefix_aware .* needs engine.scheduler vllm_v1 with engine.enable_prefix_caching "
                                         "true \\(got scheduler 'vllm_v1', enable_prefix_caching False"):
        SweepConfig(trace=sessions, engine={**v1, "router": "prefix_aware", "enable_prefix_caching": False})
    with pytest.raises(ValueError, match="got scheduler 'sarathi'"):
        SweepConfig(trace=sessions, engine={"scheduler": "sarathi", "replicas": 2, "router": "prefix_aware"})


def test_prefix_aware_counts_an_offload_tiers_blocks_weighted_by_load_vs_recompute():
    """Replica 1 holds the stream's first 3 prompt blocks in its CPU tier, not on its GPU. A
    block's load takes 1 ms (1 MB at 1 GB/s), its recompute 16 tokens x (0.064 s / 256 tokens)
    = 4 ms: a tier block counts as 1 - 1/4 = 0.75 of a GPU hit."""
    from simulator.pricing import StepPricer
    from simulator.scheduler.kv_offload import KvOffload, tier_keys

    replicas = [_replica(), _replica()]
    config = SimpleNamespace(chunk_size=256)
    for replica in replicas:
        replica.scheduler.config, replica.scheduler.token_budget = config, 256
        replica.pricer = StepPricer(ConstantCostModel(0.064))
    offload = KvOffload(cpu_blocks=8, block_size=16, bytes_per_block=1e6, h2d_bytes_per_s=1e9, d2h_bytes_per_s=1e9)
    replicas[1].scheduler.kv_offload = offload
    request = Request(1, 1.0, 60, 5, prefix_hash_ids=IDS, prefix_block_tokens=16)
    keys = tier_keys(Request(0, 0.0, 70, 1, prefix_hash_ids=IDS, prefix_block_tokens=16), 16, 0, 4)
    offload.cpu.prepare_store(keys)
    offload.cpu.complete_store(keys)
    assert offload.num_hit_blocks(request, 0) == 3 and offload.num_hit_blocks(request, 2) == 1  # capped at (60 - 1) // 16
    router = Router("prefix_aware", replicas)
    assert router.prefix_cost(1, request) == pytest.approx(4 - 0.75 * 3)  # 1.75 < 4: the tier wins
    assert router.prefix_cost(0, request) == 4.0
    assert router.pick(request) == 1
    _cache_stream(replicas[0].scheduler.block_manager, Request(2, 0.0, 70, 1, prefix_hash_ids=IDS, prefix_block_tokens=16),
                  48)  # replica 0 now holds the 3 blocks on its GPU: 1 < 1.75
    assert router.pick(request) == 0
    slow = KvOffload(cpu_blocks=8, block_size=16, bytes_per_block=1e6, h2d_bytes_per_s=1e8, d2h_bytes_per_s=1e8)
    slow.cpu.prepare_store(keys)
    slow.cpu.complete_store(keys)
    replicas[1].scheduler.kv_offload = slow  # a load takes 10 ms > 4 ms recompute: worth nothing
    assert Router("prefix_aware", replicas).prefix_cost(1, request) == 4.0
    del replicas[1].pricer
    with pytest.raises(ValueError, match="replica 1's cost model"):
        Router("prefix_aware", replicas).prefix_cost(1, request)
