"""KV offload to a CPU tier behind the prefix cache (simulator/scheduler/kv_offload.py): a
hand-worked sequence of three conversations, the LRU tier, and a tier that changes nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.scheduler.kv_offload import KvOffload, LruTier, offload_blocks, tier_key, tier_keys
from traces import Request

CONFIGS = Path(__file__).parent.parent / "experiments" / "configs"

BLOCK = 16
MB = 1e6
PCIE = 1e9  # the stated link: 1 GB/s a direction, so one 1 MB block moves in 1 ms


def request(rid: int, arrival_s: float, tokens: int, ids: tuple[int, ...]) -> Request:
    """A one-token answer to a prompt whose 16-token blocks `ids` name."""
    return Request(rid, arrival_s, tokens, 1, prefix_hash_ids=ids, prefix_block_tokens=BLOCK)


def serve(scheduler, req: Request, step_s: float = 0.01) -> tuple[float, object]:
    """Add `req` at its arrival and run it to its end; returns (the time it finished, its record).
    A step that schedules nothing (its KV is loading) waits for the load."""
    assert scheduler.add_request(req) is None
    now = req.arrival_s
    while True:
        plan = scheduler.schedule(now)
        if not plan.columns.request_ids:
            now = scheduler.next_load_done_s()
            continue
        now += step_s
        finished = scheduler.complete_step(plan, None, now)
        if finished:
            return now, finished[0]


def conversation_scheduler() -> tuple[object, KvOffload]:
    scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=8, block_size=BLOCK, chunk_size=512,
                                                          max_model_len=1024, max_num_seqs=8))
    offload = KvOffload(cpu_blocks=16, block_size=BLOCK, bytes_per_block=MB, h2d_bytes_per_s=PCIE,
                        d2h_bytes_per_s=PCIE)
    scheduler.attach_kv_offload(offload)
    return scheduler, offload


def cpu_order(offload: KvOffload) -> list[str]:
    """The tier's blocks, LRU first, as 'a0' (conversation a, block 0)."""
    return [f"{'abc'[(key >> 25) // 100]}{(key >> 25) % 100}" for key in offload.cpu.order()]


def test_three_conversations_on_8_gpu_and_16_cpu_blocks():
    """Conversations a (turns A1, A2), b (B1, B2) and c (C1); ids 0.. name a's blocks, 100.. b's,
    200.. c's. GPU pool of 8 blocks, free queue 0..7; CPU tier of 16.

    A1 (64 tokens, a0-a3) takes GPU blocks 0-3 and stores a0-a3 (write-through); freed tail
    first, the queue is 4 5 6 7 3 2 1 0. B1 (96 tokens, b0-b5) takes 4 5 6 7 3 2, evicting a3 and
    a2 from the GPU, and stores b0-b5. A2 (96 tokens, a0-a5) hits a0, a1 on the GPU (32 tokens)
    and a2, a3 in the CPU tier (32 tokens): it allocates 2 blocks, waits 2 x 1 MB / 1 GB/s =
    2 ms for their load, then computes 32 tokens and stores a4, a5 (12 blocks in the tier). C1
    (112 tokens, c0-c6) evicts the tier's 3 LRU blocks: b5 b4 b3 (A2's lookup touched a0-a3,
    so b's blocks were the oldest). B2 (128 tokens, b0-b7) finds nothing of b on the GPU (C1
    took those blocks) and b0-b2 in the tier (b3 is gone): 48 tokens, a 3 ms load; its stores
    of b3-b7 evict a5 a4 a3 a2 a1.
    """
    scheduler, offload = conversation_scheduler()
    a, b, c = range(0, 8), range(100, 108), range(200, 208)
    end, a1 = serve(scheduler, request(0, 0.0, 64, tuple(a[:4])))
    assert (a1.cached_tokens, a1.cpu_hit_tokens, a1.kv_load_wait_s) == (0, 0, 0.0)
    assert end == pytest.approx(0.01) and cpu_order(offload) == ["a3", "a2", "a1", "a0"]
    assert offload.cpu.lookup([tier_key((i, (i + 1) * BLOCK)) for i in a[:4]]) == 0  # stores done at 0.014: not ready

    _, b1 = serve(scheduler, request(1, 0.02, 96, tuple(b[:6])))
    assert offload.cpu.lookup([tier_key((i, (i + 1) * BLOCK)) for i in a[:4]]) == 4  # ready since 0.014
    assert scheduler.block_manager.free_block_ids() == [1, 0, 2, 3, 7, 6, 5, 4]

    end, a2 = serve(scheduler, request(2, 0.04, 96, tuple(a[:6])))
    assert (a2.cached_tokens, a2.cpu_hit_tokens) == (32, 32)
    assert a2.kv_load_wait_s == pytest.approx(0.002)  # 2 blocks x 1 MB at 1 GB/s
    assert a2.first_scheduled_s == pytest.approx(0.042) and end == pytest.approx(0.052)
    assert cpu_order(offload) == ["b5", "b4", "b3", "b2", "b1", "b0", "a5", "a4", "a3", "a2", "a1", "a0"]

    serve(scheduler, request(3, 0.06, 112, tuple(c[:7])))
    assert cpu_order(offload) == ["b2", "b1", "b0", "a5", "a4", "a3", "a2", "a1", "a0",
                                  "c6", "c5", "c4", "c3", "c2", "c1", "c0"]

    _, b2 = serve(scheduler, request(4, 0.08, 128, tuple(b[:8])))
    assert (b2.cached_tokens, b2.cpu_hit_tokens) == (0, 48)
    assert b2.kv_load_wait_s == pytest.approx(0.003)
    assert cpu_order(offload) == ["a0", "c6", "c5", "c4", "c3", "c2", "c1", "c0",
                                  "b7", "b6", "b5", "b4", "b3", "b2", "b1", "b0"]
    stats = offload.stats
    assert (stats.store_blocks, stats.load_blocks, stats.loads) == (4 + 6 + 2 + 7 + 5, 2 + 3, 2)
    assert (stats.store_bytes, stats.load_bytes) == (24 * MB, 5 * MB)


def test_a_hit_on_blocks_another_request_is_loading_waits_for_that_load():
    """vLLM `get_num_new_matched_tokens` returns None while a hit block is being loaded: the
    second request is skipped until the first's load is done, then hits the GPU copy."""
    scheduler, offload = conversation_scheduler()
    serve(scheduler, request(0, 0.0, 64, (0, 1, 2, 3)))
    serve(scheduler, request(1, 0.02, 128, tuple(range(100, 108))))  # evicts a0-a3 from the GPU
    for rid in (2, 3):
        scheduler.add_request(request(rid, 0.04, 80, (0, 1, 2, 3, 9 + rid)))
    assert not scheduler.schedule(0.04).columns.request_ids  # 2 loads a0-a3 (4 ms); 3 waits for them
    assert offload.stats.loads == 1 and scheduler.next_load_done_s() == pytest.approx(0.044)
    plan = scheduler.schedule(0.044)
    assert plan.columns.request_ids == [2, 3]
    assert plan.columns.query_tokens == [16, 16]  # 3 hits the blocks 2 loaded, on the GPU now
    assert plan.columns.context_tokens == [64, 64]


def test_a_tier_that_holds_nothing_changes_no_record():
    """Every hook runs (stores refused, lookups miss, decode windows off) and the records are
    those of the scheduler without a tier."""
    def run(with_tier: bool):
        scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=12, block_size=BLOCK, chunk_size=64,
                                                              max_model_len=1024, max_num_seqs=4))
        if with_tier:
            scheduler.attach_kv_offload(KvOffload(0, BLOCK, MB, PCIE, PCIE))
        reqs = [Request(i, 0.003 * i, 40 + 7 * i, 3 + i % 5, prefix_hash_ids=(1, 2, 10 + i), prefix_block_tokens=BLOCK)
                for i in range(12)]
        now, out, pending = 0.0, [], list(reqs)
        while pending or scheduler.has_work():
            while pending and pending[0].arrival_s <= now:
                scheduler.add_request(pending.pop(0))
            if not scheduler.has_work():
                now = pending[0].arrival_s
                continue
            plan = scheduler.schedule(now)
            now += 0.001 + 0.0001 * sum(plan.columns.query_tokens)
            out += scheduler.complete_step(plan, None, now)
        return sorted(out, key=lambda f: f.request_id)

    plain, tiered = run(False), run(True)
    assert [f.num_preemptions for f in plain] != [0] * 12  # the small pool preempts: the hooks matter
    assert tiered == plain


def test_lru_tier_evicts_the_oldest_unread_block_and_refuses_when_all_are_read():
    tier = LruTier("cpu", 2)
    assert tier.prepare_store(["x", "y"]) == ["x", "y"] and tier.lookup(["x"]) == 0  # not ready yet
    tier.complete_store(["x", "y"])
    tier.prepare_load(["x"])  # read: not evictable
    assert tier.prepare_store(["z"]) == ["z"] and tier.order() == ["x", "z"]  # y evicted
    assert tier.prepare_store(["w"]) is None  # x is read, z not ready: nothing evictable
    tier.complete_load(["x"])
    tier.complete_store(["z"])
    tier.touch(["x"])
    assert tier.prepare_store(["w", "x"]) == ["w"] and tier.order() == ["x", "w"]


def test_tier_capacity_is_bytes_over_a_blocks_bytes_on_every_rank():
    # Qwen3-32B bf16: 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 256 KiB a token, 4 MiB a block
    assert offload_blocks(100 * 2**30, 16 * 262144) == 25600
    with pytest.raises(ValueError, match=">= 0"):
        offload_blocks(-1, 4)


# ----- engine.kv_offload: config, errors and a run's columns ---------------------------------

def offload_point(kv_offload=None, device="h100-sxm", **engine):
    from experiments.config import SweepConfig

    tree = {"model": "llama-3-8b", "device": device, "cost_model": "roofline",
            "trace": {"kind": "sessions", "clients": 6, "turns": 3, "session_qps": 2.0, "think_time_s": 0.5,
                      "shared_prefix_tokens": 256, "num_prefixes": 2,
                      "prompt_tokens": {"dist": "fixed", "tokens": 300}, "output_tokens": {"dist": "fixed", "tokens": 40},
                      "seed": 0},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 512, "max_num_seqs": 16, "num_gpu_blocks": 200}}
    tree["engine"].update(engine)
    if kv_offload is not None:
        tree["engine"]["kv_offload"] = kv_offload
    return SweepConfig.model_validate(tree)


def refused(*args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        offload_point(*args, **kwargs)
    return str(info.value)


def test_bad_tiers_are_errors_naming_the_key():
    assert "engine.kv_offload.cpu_gib" in refused({"cpu_gib": -1}) and "greater than or equal to 0" in refused(
        {"cpu_gib": -1})
    assert ("engine.kv_offload.cpu_gib: 300 GiB per engine x 1 DP rank(s) exceeds the 256 GiB of host memory of a "
            "replica's 1 GPU(s)") in refused({"cpu_gib": 300})
    assert "engine.kv_offload.disk_gib: vLLM's native OffloadingConnector has a CPU tier only" in refused(
        {"cpu_gib": 10, "disk_gib": 100})
    assert ("engine.kv_offload needs engine.scheduler vllm_v1 with engine.enable_prefix_caching true"
            in refused({"cpu_gib": 10}, enable_prefix_caching=False))
    assert "engine.kv_offload.connector: lmcache is not modelled" in refused({"cpu_gib": 10, "connector": "lmcache"})
    assert "engine.kv_offload.cpu_gib: 0.0001 GiB holds no KV block (2 MiB each" in refused({"cpu_gib": 0.0001})
    # Refused as the config loads (exit 2), not when the point runs (a breaker found exit 1).
    assert ("engine.async_scheduling true with engine.kv_offload: async scheduling beside the KV offload tier's "
            "loads is not modelled") in refused({"cpu_gib": 10}, async_scheduling=True)
    assert offload_point({"cpu_gib": 10}, async_scheduling=False).engine.async_scheduling is False


def test_a_device_without_host_memory_cannot_size_a_tier():
    assert "engine.kv_offload.cpu_gib: device 'l40s' gives no host_memory_gib" in refused({"cpu_gib": 10}, "l40s")


def test_a_zero_tier_gives_todays_records_and_a_tier_its_columns():
    from experiments.point import run_point

    plain, zero, tiered = (run_point(offload_point(k)) for k in (None, {"cpu_gib": 0}, {"cpu_gib": 1}))
    columns = [c for c in plain.requests.columns if c != "token_times_s"]
    pd_equal = plain.requests[columns].equals(zero.requests[columns])
    assert pd_equal and list(map(list, plain.requests["token_times_s"])) == list(map(list, zero.requests["token_times_s"]))
    assert "kv_offload_cpu_hit_rate" not in plain.row and "kv_offload" not in plain.row
    row = tiered.row
    assert row["kv_offload_cpu_blocks"] == 512  # 1 GiB / (16 tokens x 128 KiB) of llama-3-8b
    assert row["kv_offload_cpu_hits_tokens"] == int(tiered.requests["cpu_hit_tokens"].sum()) > 0
    assert row["kv_offload_load_bytes"] == row["kv_offload_cpu_hits_tokens"] // 16 * 2 * 2**20
    assert row["kv_offload_store_bytes"] > 0 and row["kv_load_wait_s_mean"] > 0
    assert row["ttft_s_p50"] < plain.row["ttft_s_p50"]


def test_loads_that_fill_a_small_pool_stall_with_a_message_saying_why():
    """Two conversations' loads each take 58 of 119 blocks and neither request then fits: vLLM
    never preempts for a waiting request, so it would spin on empty steps; the simulator stops."""
    from experiments.point import run_point
    from simulator.replica import SimulationStalled

    with pytest.raises(SimulationStalled, match="waiting requests hold 116 of 119 KV blocks for their loads"):
        run_point(offload_point({"cpu_gib": 1}, num_gpu_blocks=120))


def test_a_stall_with_no_load_in_flight_is_reported_when_it_happens():
    """Three replicas behind session affinity, 300 blocks each: a replica's waiting requests hold 95
    blocks for loads already done and the head fits nowhere; under fcfs no arrival can change that.
    It waited for a timeout at inf (no load in flight) and reported the stall at t=inf after the
    other replicas' runs, 10 requests waiting by then; now at t=19.187673 s with 6."""
    from experiments.config import SweepConfig
    from experiments.config.loader import load_config
    from experiments.point import run_point
    from simulator.replica import SimulationStalled

    _, points = load_config(CONFIGS / "kv_offload_sessions.yaml", [
        "trace.clients=30", "trace.turns=4", "engine.num_gpu_blocks=300", "engine.replicas=3",
        "engine.router=session_affinity", "variants=[{engine.kv_offload: {cpu_gib: 20}}]"])
    with pytest.raises(SimulationStalled, match=r"6 waiting and 0 running .* at t=19\.187673s: waiting requests hold 95"):
        run_point(SweepConfig.model_validate(points[0]))


class ReferenceLru:
    """vLLM's `LRUOffloadingManager` as written (an OrderedDict, one move_to_end per key)."""

    def __init__(self, num_blocks: int):
        from collections import OrderedDict

        self.num_blocks, self.blocks = num_blocks, OrderedDict()

    def touch(self, keys, n=None, owner=None):
        for key in reversed(keys[:len(keys) if n is None else n]):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def prepare_store(self, keys):
        new = [k for k in keys if k not in self.blocks]
        excess = len(self.blocks) + len(new) - self.num_blocks
        if excess > 0:
            victims = [k for k, ref in self.blocks.items() if ref == 0][:excess]
            if len(victims) < excess:
                return None
            for k in victims:
                del self.blocks[k]
        for k in new:
            self.blocks[k] = -1
        return new


def test_segment_lru_keeps_vllms_order_on_random_requests():
    """Requests with growing key lists (shared prefixes), touching at admission and storing as
    they grow (touching all their keys after each store), loads holding blocks, stores completed
    late: the segment LRU's order, its evictions and refusals are the OrderedDict's."""
    import random

    rng = random.Random(7)
    for trial in range(30):
        tier, ref = LruTier("cpu", rng.randint(4, 40)), ReferenceLru(0)
        ref.num_blocks = tier.num_blocks
        live: dict[int, list] = {}
        for step in range(400):
            op = rng.random()
            if op < 0.15 or not live:  # a new request: a shared prefix, then its own keys
                rid = step
                prefix = [("p", rng.randint(0, 3), i) for i in range(rng.randint(0, 4))]
                live[rid] = prefix + [(rid, i) for i in range(rng.randint(1, 12))]
                keys = live[rid]
                n = rng.randint(1, len(keys))
                tier.touch(keys, n, rid)
                ref.touch(keys, n)
            elif op < 0.75:  # a request stores its next blocks, then touches them all
                rid = rng.choice(list(live))
                keys = live[rid]
                if rng.random() < 0.3:
                    keys += [(rid, len(keys) + i) for i in range(rng.randint(1, 3))]
                end = rng.randint(1, len(keys))
                start = rng.randint(0, end - 1)
                got, want = tier.prepare_store(keys[start:end]), ref.prepare_store(keys[start:end])
                assert got == want
                if got:
                    tier.touch(keys, end, rid)
                    ref.touch(keys, end)
            elif op < 0.85:  # stores complete; a load holds or releases a block
                for key, value in list(ref.blocks.items()):
                    if value == -1 and rng.random() < 0.5:
                        ref.blocks[key] = 0
                        tier.complete_store([key])
                    elif value >= 0 and rng.random() < 0.1:
                        if rng.random() < 0.5 or not value:
                            ref.blocks[key] = value + 1
                            tier.prepare_load([key])
                        else:
                            ref.blocks[key] = value - 1
                            tier.complete_load([key])
            else:
                rid = rng.choice(list(live))
                del live[rid]
                tier.forget(rid)
            assert tier.order() == list(ref.blocks), (trial, step)
            assert tier.blocks == dict(ref.blocks)
            assert tier._num_evictable == list(ref.blocks.values()).count(0)


def test_tier_keys_are_one_to_one():
    keys = [(h, e) for h in (-3, 0, 1, 2**40) for e in (16, 32, 2**23)] + [(r, j, 0) for r in (0, 1, 7) for j in (0, 1, 5)]
    assert len({tier_key(k) for k in keys}) == len(keys)


def test_tier_keys_are_the_block_keys_as_ints():
    from simulator.scheduler.prefix_cache import block_keys

    for prompt, out, ids, hash_block in [(100, 50, (), 16), (100, 50, (5, 6, 7), 16), (1000, 200, (9, 8), 512),
                                         (600, 300, (1, 2, 3), 512), (40, 8, (3,) * 3, 16)]:
        req = Request(77, 0.0, prompt, out, prefix_hash_ids=ids, prefix_block_tokens=hash_block)
        for first, last in [(0, 0), (0, 1), (0, 9), (2, 9), (3, 40), (30, 60), (70, 71)]:
            assert tier_keys(req, 16, first, last) == [tier_key(k) for k in block_keys(req, 16, first, last)]


def test_vllm_serve_flags_of_a_point_with_offload():
    from experiments.planning.vllm_flags import vllm_serve_flags

    flags = vllm_serve_flags(offload_point({"cpu_gib": 50}))
    assert flags.endswith("--num-gpu-blocks-override 200 --kv-offloading-backend native --kv-offloading-size 50")
    assert "--kv-offloading" not in vllm_serve_flags(offload_point({"cpu_gib": 0}))


def test_a_decode_window_leaves_the_tier_as_its_steps_would():
    """Running decodes filling blocks at different steps: `decode_window` + `advance_decodes`
    give the step-by-step path's records, and its tier (order, readiness, store times, link)."""
    import copy

    def started():
        scheduler, offload = conversation_scheduler()
        scheduler.block_manager.__init__(64, BLOCK)  # room for the decodes
        for rid, (tokens, out) in enumerate([(40, 40), (57, 30), (70, 45)]):
            scheduler.add_request(Request(rid, 0.0, tokens, out, prefix_hash_ids=tuple(range(10 * rid, 10 * rid + 9)),
                                          prefix_block_tokens=BLOCK))
        plan = scheduler.schedule(0.0)
        scheduler.complete_step(plan, None, 0.01)
        return scheduler, offload

    window, stepwise = started(), started()
    running, steps = window[0].decode_window()
    assert steps == 29  # up to request 1's last token
    ends = [0.01 + 0.002 * (j + 1) for j in range(steps)]
    _, finished_window = window[0].advance_decodes(ends)
    finished_steps, now = [], 0.01
    for end in ends:
        plan = stepwise[0].schedule(now)
        finished_steps += stepwise[0].complete_step(plan, None, end)
        now = end
    assert finished_window == finished_steps and [f.request_id for f in finished_steps] == [1]
    a, b = window[1], stepwise[1]
    assert a.cpu.order() == b.cpu.order() and a.cpu.blocks == b.cpu.blocks
    assert (a._storing, a._ready, a._unsubmitted, a._d2h_free_s) == (b._storing, b._ready, b._unsubmitted,
                                                                      b._d2h_free_s)
    assert a.stats == b.stats and a.stats.store_blocks > 9
