"""Multi-turn sessions: N conversations, each turn's prompt the whole previous context plus the
user's new tokens, the next turn sent `think_time_s` after the previous answer ends.

A closed loop whose clients hold conversations, so the simulator drives it as it drives
`ClosedLoopWorkload` (`simulator.simulate`): the conversations start at 0 s, or one after another
as a Poisson process of `session_qps` conversations per second, and each finished turn releases
the conversation's next one. Turn t of conversation s has prompt
  shared prefix + (user_0 + answer_0) + ... + (user_{t-1} + answer_{t-1}) + user_t
and generates answer_t; its `prefix_hash_ids` name that whole stream, answer included (16-token
blocks, `traces.shared_prefix`), so the next turn can hit every block the previous one
completed, as vLLM's prefix cache does when the chat history is sent back verbatim. (The answer's
last token is never computed, so the block holding it is not cached, as in vLLM; an answer
that ends inside the prompt's last block is not named, so those few tokens do not hit.)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from traces.arrivals import poisson_arrivals
from traces.closed_loop import ClosedLoopWorkload
from traces.errors import TraceFormatError
from traces.readers.csv_table import read_csv_table
from traces.readers.load_result import RowAccount
from traces.readers.parse_file import flag_line_problems
from traces.readers.row_problems import RowProblems
from traces.readers.table import check_regular_file, csv_header
from traces.request import Request
from traces.shared_prefix import (BLOCKS_PER_STREAM, GENERATED_BLOCK_TOKENS, SESSION_ID_BASE, check_shared_prefix,
                                  prefix_assignment, prefix_ids)


class SessionWorkload(ClosedLoopWorkload):
    """`num_sessions` conversations of `turns` turns each (module docstring).

    Lengths are drawn up front from `numpy.random.default_rng(seed)`: the new user tokens and
    the answer of turn t of conversation s are draw s * turns + t, whatever the timings.
    Conversation s uses shared prefix `traces.shared_prefix.prefix_assignment` (seeded).

    Args:
        num_sessions: conversations, >= 1 (the clients of the closed loop).
        turns: turns per conversation, >= 1.
        think_time_s: seconds between an answer's end and the next turn.
        user_tokens, output_tokens: length specs of each turn's new user tokens and answer.
        shared_prefix_tokens: a system prompt in front of every conversation (0: none), one of
            `num_prefixes`.
        seed: seeds the draws.
        session_qps: conversations start as a Poisson process at this rate (conversations per
            second; conversation s at the s-th arrival, the first at 0 s, gaps drawn from
            `default_rng([seed, 1])`, apart from the lengths); None: all start at 0 s.
        max_context_tokens: the longest prompt + answer the engine serves (its max_model_len):
            a turn's `prefix_hash_ids` name at most that many tokens, as no served request holds
            more; None: the whole stream. It bounds each request's ids before they are built (three
            turns of 10^9 user tokens, all rejected as too long, once took 78 s and raised MemoryError).

    A turn whose prompt + answer exceed max_model_len is rejected by the scheduler (counted as
    rejected_too_long) and the conversation goes on, every later turn being longer still.

    Raises:
        ValueError: a bad count, think time, length spec, prefix setting or session_qps
            (`traces.arrivals.check_rate`).
    """

    def __init__(self, num_sessions: int, turns: int, think_time_s: float = 0.0, user_tokens: Any = 128,
                 output_tokens: Any = 128, shared_prefix_tokens: int = 0, num_prefixes: int = 1, seed: int = 0,
                 session_qps: float | None = None, max_context_tokens: int | None = None):
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise ValueError(f"turns must be an int >= 1, got {turns!r}")
        check_shared_prefix(shared_prefix_tokens, num_prefixes)
        super().__init__(num_sessions, think_time_s, user_tokens, output_tokens, num_sessions * turns, seed)
        self.turns = turns
        users, answers = self._prompt_tokens.tolist(), self._output_tokens.tolist()
        # (new user tokens, answer) of each turn, per conversation: draw s * turns + t.
        self._conversations = [list(zip(users[s * turns:(s + 1) * turns], answers[s * turns:(s + 1) * turns]))
                               for s in range(num_sessions)]
        self.shared_prefix_tokens = shared_prefix_tokens
        assignment = prefix_assignment(num_sessions, num_prefixes, seed)
        self._prefix_ids = [prefix_ids(int(p), shared_prefix_tokens) for p in assignment]
        self._turns_issued = [0] * num_sessions
        self._context_tokens = [shared_prefix_tokens] * num_sessions  # the conversation so far
        self.session_qps = session_qps
        self.max_context_tokens = max_context_tokens
        self.ignored_columns: tuple[str, ...] = ()  # columns of a turns file not read (`from_turns`)
        self._start_s = ([0.0] * num_sessions if session_qps is None
                         else poisson_arrivals(session_qps, num_sessions, np.random.default_rng([seed, 1])).tolist())

    @classmethod
    def from_turns(cls, conversations: list[list[tuple[int, int]]], think_time_s: float = 0.0,
                   shared_prefix_tokens: int = 0, num_prefixes: int = 1, seed: int = 0,
                   session_qps: float | None = None, ignored_columns: tuple[str, ...] = (),
                   max_context_tokens: int | None = None) -> "SessionWorkload":
        """Conversations given turn by turn: conversations[s][t] = (new user tokens, answer
        tokens) of turn t of conversation s (`read_sessions`). `turns` is then the longest.
        `ignored_columns`: the columns of their file that were not read
        (`SessionsLoadResult.ignored_columns`), kept as the attribute of that name for reports.

        Raises:
            ValueError: no conversation, an empty one, or a count that is not an int >= 1.
        """
        if not conversations or any(not turns for turns in conversations):
            raise ValueError("sessions need at least one conversation, each of at least one turn")
        for turns in conversations:
            for user, answer in turns:
                for value in (user, answer):
                    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                        raise ValueError(f"turn lengths must be ints >= 1, got {value!r}")
        workload = cls(len(conversations), max(len(turns) for turns in conversations), think_time_s, 1, 1,
                       shared_prefix_tokens, num_prefixes, seed, session_qps, max_context_tokens)
        workload._conversations = [list(turns) for turns in conversations]
        workload.ignored_columns = tuple(ignored_columns)
        workload.num_requests = sum(len(turns) for turns in conversations)
        return workload

    def initial_requests(self) -> list[Request]:
        """Each conversation's first turn, arriving at its start time (0 s, or the `session_qps`
        arrivals), in conversation order (the simulator submits those after 0 s at their time).

        Raises:
            ValueError: requests were already issued (the loop starts once).
        """
        if self.num_issued:
            raise ValueError(f"the sessions have already started ({self.num_issued} requests issued)")
        return [self._issue(s, self._start_s[s]) for s in range(self.num_clients)]

    def session_of(self, request_id: int) -> int:
        """The conversation request `request_id` belongs to."""
        return self.client_of(request_id)

    def _issue(self, client_id: int, arrival_s: float) -> Request | None:
        turn = self._turns_issued[client_id]
        if turn >= len(self._conversations[client_id]):
            return None
        self._turns_issued[client_id] = turn + 1
        user, answer = self._conversations[client_id][turn]
        prompt = self._context_tokens[client_id] + user
        self._context_tokens[client_id] = prompt + answer
        request_id = self.num_issued
        self._client_of.append(client_id)
        named = prompt + answer if self.max_context_tokens is None else min(prompt + answer, self.max_context_tokens)
        return Request(request_id, float(arrival_s), prompt, answer,
                       prefix_hash_ids=self._stream_ids(client_id, named),
                       prefix_block_tokens=GENERATED_BLOCK_TOKENS)

    def _stream_ids(self, session: int, num_tokens: int) -> tuple[int, ...]:
        shared = self._prefix_ids[session]
        base = SESSION_ID_BASE + session * BLOCKS_PER_STREAM
        num_blocks = -(-num_tokens // GENERATED_BLOCK_TOKENS)
        return shared + tuple(range(base + len(shared), base + num_blocks))


SESSION_COLUMNS = ("session_id", "turn", "user_tokens", "output_tokens")


@dataclass(frozen=True, kw_only=True)
class SessionsLoadResult(RowAccount):
    """The outcome of `read_sessions`: `conversations[s][t]` = (new user tokens, answer tokens) of
    turn t of conversation s, for `SessionWorkload.from_turns`; and the `RowAccount` of the file
    (format "sessions"; `rejected_rows` is empty: a bad row is an error; `ignored_columns` the
    columns other than `SESSION_COLUMNS`, ignored and reported as a trace file's are)."""

    conversations: list[list[tuple[int, int]]]

    def summary(self) -> str:
        """A few lines for people: conversations, turns, and the ignored columns."""
        turns = sum(len(c) for c in self.conversations)
        head = f"{self.path} (sessions): {len(self.conversations)} conversations, {turns} turns"
        return "\n".join([head, *self.report_lines()])


def read_sessions(path: str | Path) -> SessionsLoadResult:
    """Conversations from a CSV with columns `session_id,turn,user_tokens,output_tokens` (one row
    per turn: the user's new tokens and the answer's; any other column is ignored and listed in
    `ignored_columns`). Conversations keep the order of their first row; a conversation's rows
    need not be adjacent, but its turns must read 0, 1, 2, ... in file order. The file is read as
    trace CSVs are (`traces.readers.csv_table`): rows are numbered from 1 for the first data row,
    blank lines skipped without renumbering, quoted fields unquoted.

    Raises:
        FileNotFoundError, IsADirectoryError, TraceFormatError: not a regular file
            (`traces.readers.table.check_regular_file`).
        TraceFormatError: not UTF-8, a column named twice or missing; a row with too many
            fields or a stray quote; a turn out of order (naming the row, the session and the
            turn expected); a length that is not an integer >= 1 (naming row and field).
    """
    path = Path(path)
    check_regular_file(path)  # a FIFO or device would block or never end
    header = csv_header(path)  # before the rows: an empty file or another CSV is named by its header
    missing = [c for c in SESSION_COLUMNS if c not in header]
    if missing:
        raise TraceFormatError(path, field="header", value=",".join(header),
                               expected=f"the columns {','.join(SESSION_COLUMNS)} (missing: {', '.join(missing)})")
    table = read_csv_table(path)
    problems = RowProblems(table.row_numbers, table.line_numbers)
    flag_line_problems(table, problems)
    first_bad = problems.first_error(path)
    conversations: dict[str, list[tuple[int, int]]] = {}
    for i, (session, turn, user, answer) in enumerate(table.frame[list(SESSION_COLUMNS)].itertuples(index=False)):
        where = {"row": int(table.row_numbers[i]), "line": int(table.line_numbers[i])}
        if first_bad is not None and first_bad.row == where["row"]:
            raise first_bad
        turns = conversations.setdefault(session.strip(), [])
        if _count(path, where, "turn", turn, minimum=0) != len(turns):
            raise TraceFormatError(path, **where, field="turn", reason="turn out of order", value=turn,
                                   expected=f"turn {len(turns)} of session {session.strip()!r} next (turns of a "
                                   "session are 0, 1, 2, ... in file order)")
        turns.append((_count(path, where, "user_tokens", user), _count(path, where, "output_tokens", answer)))
    if not conversations:
        raise TraceFormatError(path, expected="at least one turn row")
    return SessionsLoadResult(path=path, format="sessions", rejected_rows={},
                              ignored_columns=tuple(table.unknown_columns(SESSION_COLUMNS)),
                              conversations=list(conversations.values()))


def _count(path: Path, where: dict, field: str, text: str, minimum: int = 1) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < minimum or value > 10**9:
        raise TraceFormatError(path, **where, field=field, value=text, expected=f"an integer from {minimum} to 10^9")
    return value
