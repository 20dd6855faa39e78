"""Generated token identity: shared system prompts and multi-turn sessions, worked by hand."""
from __future__ import annotations

import pytest

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request
from traces.sessions import SessionWorkload
from traces.shared_prefix import PREFIX_ID_BASE, SESSION_ID_BASE, BLOCKS_PER_STREAM, with_shared_prefixes


def test_shared_prefixes_split_requests_evenly_and_name_the_full_blocks():
    requests = [Request(i, 0.1 * i, 10 + i, 5) for i in range(7)]
    out = with_shared_prefixes(requests, shared_prefix_tokens=40, num_prefixes=3, seed=1)
    assert [r.prompt_tokens for r in out] == [50 + i for i in range(7)]
    assert [(r.arrival_s, r.output_tokens, r.request_id) for r in out] == [(0.1 * i, 5, i) for i in range(7)]
    # 40 tokens = 2 full 16-token blocks (the third also holds the request's own tokens).
    prefixes = sorted({r.prefix_hash_ids for r in out})
    base = PREFIX_ID_BASE
    assert prefixes == [(base + p * BLOCKS_PER_STREAM, base + p * BLOCKS_PER_STREAM + 1) for p in range(3)]
    counts = sorted(sum(r.prefix_hash_ids == ids for r in out) for ids in prefixes)
    assert counts == [2, 2, 3]
    assert out == with_shared_prefixes(requests, 40, 3, seed=1)  # seeded
    with pytest.raises(ValueError, match="num_prefixes must be >= 1"):
        with_shared_prefixes(requests, 40, 0)
    with pytest.raises(ValueError, match="already carry prefix_hash_ids"):
        with_shared_prefixes([Request(0, 0.0, 10, 1, prefix_hash_ids=(1,))], 40)


def test_session_turns_carry_the_whole_conversation():
    # Shared prefix 32, user 20 and answer 10 tokens per turn: prompts 52, 82, 112; each turn's
    # ids name its stream (prompt + answer) in 16-token blocks: the 2 prefix blocks, then the
    # conversation's own.
    workload = SessionWorkload(2, 3, think_time_s=0.5, user_tokens=20, output_tokens=10, shared_prefix_tokens=32)
    first = workload.initial_requests()
    assert [(r.request_id, r.prompt_tokens, r.output_tokens, r.arrival_s) for r in first] == [
        (0, 52, 10, 0.0), (1, 52, 10, 0.0)]
    second = workload.next_request(0, 2.0)
    third = workload.next_request(0, 4.0)
    assert (second.prompt_tokens, second.arrival_s, third.prompt_tokens) == (82, 2.5, 112)
    assert workload.next_request(0, 6.0) is None  # three turns
    own = SESSION_ID_BASE
    assert first[0].prefix_hash_ids == (PREFIX_ID_BASE, PREFIX_ID_BASE + 1, own + 2, own + 3)  # ceil(62 / 16)
    assert third.prefix_hash_ids[:6] == second.prefix_hash_ids  # each turn extends the last
    assert len(third.prefix_hash_ids) == 8  # ceil(122 / 16)
    assert first[1].prefix_hash_ids[2] == own + BLOCKS_PER_STREAM + 2  # conversation 1's own blocks
    assert [workload.session_of(r.request_id) for r in (*first, second, third)] == [0, 1, 0, 0]
    with pytest.raises(ValueError, match="turns must be an int >= 1"):
        SessionWorkload(2, 0)


def test_sessions_hit_the_previous_turn_and_the_shared_prompt():
    # vllm_v1, block size 16. Turn 0 of conversation 0 caches its full prompt blocks at admission
    # (3 of 52 tokens); conversation 1's turn 0, admitted in the same step, hits the 2 prefix
    # blocks (32 tokens). Turn 0 computes 52 + 10 - 1 = 61 tokens: 3 full blocks, the third
    # ending at 48. Turn 1 (82 tokens) hits those 3 blocks, 48 tokens; turn 2 (112) hits the
    # 5 full blocks turn 1 computed (91 tokens), 80 tokens.
    workload = SessionWorkload(2, 3, think_time_s=0.5, user_tokens=20, output_tokens=10, shared_prefix_tokens=32)
    scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=200, max_model_len=1024, chunk_size=512))
    result = simulate(workload, scheduler, ConstantCostModel(0.01))
    frame = result.requests.assign(session=lambda f: f["request_id"].map(workload.session_of))
    by_session = {s: group.sort_values("request_id") for s, group in frame.groupby("session")}
    assert by_session[0]["prompt_tokens"].tolist() == [52, 82, 112]
    assert by_session[0]["cached_tokens"].tolist() == [0, 48, 80]
    assert by_session[1]["cached_tokens"].tolist() == [32, 48, 80]
    assert result.summary["prefix_cache_hits_tokens"] == 32 + 2 * (48 + 80)
    assert (result.requests["finish_reason"] == "completed").all()


def test_a_shared_prefix_longer_than_max_model_len_is_a_counted_rejection():
    workload = SessionWorkload(3, 2, user_tokens=10, output_tokens=5, shared_prefix_tokens=300)
    scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=200, max_model_len=256, chunk_size=512))
    result = simulate(workload, scheduler, ConstantCostModel(0.01))
    assert result.summary["rejected_too_long"] == 6 and result.summary["completed"] == 0


def test_sessions_trace_config():
    from experiments.config import SweepConfig
    config = SweepConfig(trace={"kind": "sessions", "clients": 4, "turns": 3, "prompt_tokens": 20,
                                "output_tokens": 10, "shared_prefix_tokens": 32, "num_prefixes": 2},
                         engine={"scheduler": "vllm_v1", "chunk_size": 512})
    assert config.trace.num_requests == 12
    workload = config.trace.workload()
    assert isinstance(workload, SessionWorkload) and workload.turns == 3
    with pytest.raises(ValueError, match="num_requests is clients x turns"):
        SweepConfig(trace={"kind": "sessions", "clients": 4, "turns": 3, "num_requests": 5},
                    engine={"scheduler": "vllm_v1", "chunk_size": 512})


def test_generated_kinds_take_a_shared_prefix():
    # 200 requests, 4 system prompts of 500 tokens = 31 full 16-token blocks (496 tokens): every
    # request but the first of each prompt hits them (arrivals 0.25 s apart on average, far
    # longer than a prefill), so hits = (200 - 4) * 496.
    from experiments.config import SweepConfig
    from experiments.point import run_point
    trace = {"kind": "synthetic", "qps": 4, "num_requests": 200, "prompt_tokens": [50, 300],
             "output_tokens": [20, 100], "shared_prefix_tokens": 500, "num_prefixes": 4}
    row = run_point(SweepConfig(trace=trace, engine={"scheduler": "vllm_v1", "chunk_size": 512})).row
    assert row["completed"] == 200 and row["prefix_cache_hits_tokens"] == 196 * 496
    row = run_point(SweepConfig(trace={**trace, "shared_prefix_tokens": 0},
                                engine={"scheduler": "vllm_v1", "chunk_size": 512})).row
    assert row["prefix_cache_hits_tokens"] == 0


def test_sessions_replay_from_a_file_of_turns(tmp_path):
    from traces.sessions import read_sessions
    path = tmp_path / "turns.csv"
    # Conversations keep their first row's order; their rows may interleave.
    path.write_text("session_id,turn,user_tokens,output_tokens,note\n"
                    "b,0,20,10,x\na,0,30,5,\nb,1,7,3,\nb,2,4,2,\n")
    loaded = read_sessions(path)
    assert loaded.conversations == [[(20, 10), (7, 3), (4, 2)], [(30, 5)]]
    assert loaded.ignored_columns == ("note",) and loaded.rejected_rows == {}
    workload = SessionWorkload.from_turns(loaded.conversations, think_time_s=0.1)
    first = workload.initial_requests()
    assert [(r.prompt_tokens, r.output_tokens) for r in first] == [(20, 10), (30, 5)]
    later = workload.next_request(0, 1.0)
    assert (later.prompt_tokens, later.output_tokens, later.arrival_s) == (37, 3, 1.1)
    assert workload.next_request(1, 1.0) is None  # conversation a has one turn
    assert workload.next_request(0, 2.0).prompt_tokens == 44
    assert workload.next_request(0, 3.0) is None and workload.num_requests == 4
    from experiments.config import SweepConfig
    from experiments.point import run_point
    config = SweepConfig(trace={"kind": "sessions", "path": str(path)}, engine={"scheduler": "vllm_v1", "chunk_size": 256})
    row = run_point(config).row
    assert row["completed"] == 4 and row["prefix_cache_hits_tokens"] > 0
    assert row["trace_source"] == f"{path} (sessions, 2 conversations, 4 turns; ignored unknown columns: note)"
    generated = SweepConfig(trace={"kind": "sessions", "clients": 3, "turns": 2}, engine={"scheduler": "vllm_v1"})
    assert run_point(generated).row["trace_source"] == "sessions, 3 conversations x 2 turns"
    with pytest.raises(ValueError, match="trace.path gives the conversations and their lengths; leave out trace.turns"):
        SweepConfig(trace={"kind": "sessions", "path": str(path), "turns": 3},
                    engine={"scheduler": "vllm_v1", "chunk_size": 256})


@pytest.mark.parametrize("body,message", [
    ("a,0,5,5\na,2,5,5\n", "row 2 (file line 3): field 'turn': turn out of order: got '2'; expected turn 1 of session 'a' next"),
    ("a,1,5,5\n", "row 1 (file line 2): field 'turn': turn out of order"),
    ("a,0,5,5\na,1,0,5\n", "row 2 (file line 3): field 'user_tokens': got '0'; expected an integer from 1"),
    ("a,0,5,x\n", "row 1 (file line 2): field 'output_tokens': got 'x'"),
])
def test_session_files_with_bad_turns_are_clear_errors(tmp_path, body, message):
    from traces import TraceFormatError
    from traces.sessions import read_sessions
    path = tmp_path / "turns.csv"
    path.write_text("session_id,turn,user_tokens,output_tokens\n" + body)
    with pytest.raises(TraceFormatError, match=message.replace("(", "\\(").replace(")", "\\)")):
        read_sessions(path)
    (tmp_path / "no_turn.csv").write_text("session_id,user_tokens,output_tokens\na,5,5\n")
    with pytest.raises(TraceFormatError, match="missing: turn"):
        read_sessions(tmp_path / "no_turn.csv")


def test_a_sessions_file_reports_unknown_columns_and_numbers_rows_as_trace_files_do(tmp_path):
    """Breaker pass D, d16: an unknown column was accepted with no note, and rows after a blank
    line were numbered as if it were not there. Rows are data rows from 1 (file line 2)."""
    from traces import TraceFormatError
    from traces.sessions import read_sessions
    path = tmp_path / "turns.csv"
    path.write_text('session_id,turn,user_tokens,output_tokens,extra,note\n"a",0,100,20,x,\n\nb,0,50,10,y,\na,1,30,5,z,\n')
    loaded = read_sessions(path)
    assert loaded.conversations == [[(100, 20), (30, 5)], [(50, 10)]]  # "a" unquoted: one conversation
    assert loaded.ignored_columns == ("extra", "note")
    assert loaded.summary() == f"{path} (sessions): 2 conversations, 3 turns\n  ignored unknown columns: extra, note"
    path.write_text("session_id,turn,user_tokens,output_tokens\na,0,100,20\n\na,2,30,5\n")
    with pytest.raises(TraceFormatError) as info:
        read_sessions(path)
    assert str(info.value) == (f"{path}: row 3 (file line 4): field 'turn': turn out of order: got '2'; expected "
                               "turn 1 of session 'a' next (turns of a session are 0, 1, 2, ... in file order)")
    path.write_text("session_id,turn,user_tokens,output_tokens\na,0,100,20\na,1,3,5,9\na,1,x,5\n")
    with pytest.raises(TraceFormatError, match=r"row 2 \(file line 3\): field '\(whole line\)': malformed line: "
                                               r"got 'a,1,3,5,9'; expected no more fields than the header's 4"):
        read_sessions(path)
    path.write_text("")
    with pytest.raises(TraceFormatError, match="field 'header': got ''; expected the columns session_id,turn,"):
        read_sessions(path)  # not pandas' EmptyDataError
    path.write_text('session_id,turn,user_tokens,output_tokens\na,0,100,20\na,1,3,5"\n')
    with pytest.raises(TraceFormatError, match=r"row 2 \(file line 3\): field 'output_tokens': bad quoting"):
        read_sessions(path)


def test_sessions_config_files_load_with_and_without_a_turns_file(tmp_path):
    from experiments.config import ConfigError, load_config
    (tmp_path / "turns.csv").write_text("session_id,turn,user_tokens,output_tokens\na,0,20,10\n")
    engine = "engine: {scheduler: vllm_v1, chunk_size: 256}\n"
    generated = tmp_path / "generated.yaml"
    generated.write_text("trace: {kind: sessions, clients: 2, turns: 3}\n" + engine)
    base, points = load_config(generated)
    assert base.trace.num_requests == 6 and len(points) == 1
    from_file = tmp_path / "from_file.yaml"
    from_file.write_text("trace: {kind: sessions, path: turns.csv}\n" + engine)  # relative to the config
    base, _ = load_config(from_file)
    assert base.trace.workload().num_requests == 1
    missing = tmp_path / "missing.yaml"
    missing.write_text("trace: {kind: sessions, path: nope.csv}\n" + engine)
    with pytest.raises(ConfigError, match="trace.path.*no such file"):
        load_config(missing)


def test_sessions_start_as_a_poisson_process_of_session_qps():
    # Conversation s's first turn arrives at the s-th arrival of a Poisson process (seeded apart
    # from the lengths, so the lengths are those of the unstaggered workload).
    import numpy as np

    from traces.arrivals import poisson_arrivals
    staggered = SessionWorkload(5, 2, user_tokens=[10, 90], output_tokens=[5, 50], seed=4, session_qps=2.5)
    together = SessionWorkload(5, 2, user_tokens=[10, 90], output_tokens=[5, 50], seed=4)
    first, zero = staggered.initial_requests(), together.initial_requests()
    expected = poisson_arrivals(2.5, 5, np.random.default_rng([4, 1])).tolist()
    assert [r.arrival_s for r in first] == expected and expected[0] == 0.0 and expected[4] > 0
    assert [r.arrival_s for r in zero] == [0.0] * 5
    assert [(r.prompt_tokens, r.output_tokens) for r in first] == [(r.prompt_tokens, r.output_tokens) for r in zero]
    with pytest.raises(ValueError, match="qps must be a finite number > 0"):
        SessionWorkload(2, 2, session_qps=0.0)
    # The simulator submits each first turn at its start: no request arrives before it.
    scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=200, max_model_len=1024, chunk_size=512))
    workload = SessionWorkload(5, 2, user_tokens=[10, 90], output_tokens=[5, 50], seed=4, session_qps=2.5)
    frame = simulate(workload, scheduler, ConstantCostModel(0.01)).requests
    starts = frame.assign(s=frame["request_id"].map(workload.session_of)).groupby("s")["arrival_s"].min()
    assert starts.tolist() == expected
    assert (frame.groupby(frame["request_id"].map(workload.session_of))["first_token_s"].min().to_numpy()
            >= np.array(expected)).all()


def test_generated_ids_survive_a_canonical_jsonl_round_trip(tmp_path):
    # Generated ids name 16-token blocks; written without their block size they would read back
    # as Mooncake's 512-token ids (a 52-token prompt would then share nothing past its first id).
    from traces.readers.read_trace import read_trace
    from traces.shared_prefix import with_shared_prefixes
    from traces.writers import write_canonical
    requests = with_shared_prefixes([Request(i, 0.5 * i, 20 + i, 5) for i in range(4)], 40, 2, seed=0)
    requests.append(Request(4, 3.0, 600, 5, prefix_hash_ids=(7, 8)))  # Mooncake's 512-token ids
    path = write_canonical(requests, tmp_path / "trace.jsonl")
    lines = path.read_text().splitlines()
    assert '"prefix_block_tokens": 16' in lines[0] and "prefix_block_tokens" not in lines[4]
    back = read_trace(path).requests
    assert [(r.prefix_hash_ids, r.prefix_block_tokens) for r in back] == [
        (r.prefix_hash_ids, r.prefix_block_tokens) for r in requests]
    assert [r.prefix_block_tokens for r in back] == [16, 16, 16, 16, 512]
    # A bad block size is a counted rejection naming the field, or (strict) an error.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + lines[1].replace('"prefix_block_tokens": 16', '"prefix_block_tokens": 0') + "\n")
    loaded = read_trace(bad)
    assert len(loaded.requests) == 1 and loaded.num_rejected == 1
    from traces.errors import TraceFormatError
    with pytest.raises(TraceFormatError, match="row 2.*prefix_block_tokens"):
        read_trace(bad, strict=True)


def test_turns_far_longer_than_the_context_name_only_the_served_context(tmp_path):
    # Three turns of 10^9 user tokens (within the per-row bound), all rejected as too long, took
    # 78 s and raised MemoryError building 62.5 M prefix ids a turn (issue 30 item 3).
    from experiments.config import SweepConfig
    from experiments.point import run_point

    huge = SessionWorkload.from_turns([[(10**9, 10)] * 3], max_context_tokens=8192)
    requests = [huge.initial_requests()[0]] + [huge._issue(0, 0.0) for _ in range(2)]
    assert [r.prompt_tokens for r in requests] == [10**9, 2 * 10**9 + 10, 3 * 10**9 + 20]
    assert [len(r.prefix_hash_ids) for r in requests] == [512, 512, 512]  # 8,192 tokens / 16
    small = [[(40, 8), (30, 5)]]  # shorter than the cap: the same ids as without one
    capped, whole = (SessionWorkload.from_turns(small, max_context_tokens=cap) for cap in (8192, None))
    assert [r.prefix_hash_ids for r in capped.initial_requests()] == [r.prefix_hash_ids for r in whole.initial_requests()]

    (tmp_path / "turns.csv").write_text("session_id,turn,user_tokens,output_tokens\n"
                                        + "".join(f"1,{t},1000000000,10\n" for t in range(3)))
    point = SweepConfig.model_validate({"trace": {"kind": "sessions", "path": str(tmp_path / "turns.csv")},
                                        "engine": {"scheduler": "vllm_v1"}})
    row = run_point(point).row
    assert (row["completed"], row["rejected_too_long"]) == (0, 3)
