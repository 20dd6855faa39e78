"""Multi-turn sessions: N conversations, each turn's prompt the whole previous context plus the
user's new tokens, the next turn sent `think_time_s` after the previous answer ends.

A closed loop whose clients hold conversations, so the simulator drives it as it drives
`ClosedLoopWorkload` (`simulator.simulate`): all conversations start at 0 s and each finished
turn releases the conversation's next one. Turn t of conversation s has prompt
  shared prefix + (user_0 + answer_0) + ... + (user_{t-1} + answer_{t-1}) + user_t
and generates answer_t; its `prefix_hash_ids` name that whole stream, answer included (16-token
blocks, `traces.shared_prefix`), so the next turn can hit every block the previous one
completed, as vLLM's prefix cache does when the chat history is sent back verbatim. (The answer's
last token is never computed, so the block holding it is not cached, as in vLLM; an answer
that ends inside the prompt's last block is not named, so those few tokens do not hit.)
"""
from __future__ import annotations

from typing import Any

from traces.closed_loop import ClosedLoopWorkload
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

    A turn whose prompt + answer exceed max_model_len is rejected by the scheduler (counted as
    rejected_too_long) and the conversation goes on, every later turn being longer still.

    Raises:
        ValueError: a bad count, think time, length spec or prefix setting.
    """

    def __init__(self, num_sessions: int, turns: int, think_time_s: float = 0.0, user_tokens: Any = 128,
                 output_tokens: Any = 128, shared_prefix_tokens: int = 0, num_prefixes: int = 1, seed: int = 0):
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise ValueError(f"turns must be an int >= 1, got {turns!r}")
        check_shared_prefix(shared_prefix_tokens, num_prefixes)
        super().__init__(num_sessions, think_time_s, user_tokens, output_tokens, num_sessions * turns, seed)
        self.turns = turns
        self.shared_prefix_tokens = shared_prefix_tokens
        assignment = prefix_assignment(num_sessions, num_prefixes, seed)
        self._prefix_ids = [prefix_ids(int(p), shared_prefix_tokens) for p in assignment]
        self._turns_issued = [0] * num_sessions
        self._context_tokens = [shared_prefix_tokens] * num_sessions  # the conversation so far

    def session_of(self, request_id: int) -> int:
        """The conversation request `request_id` belongs to."""
        return self.client_of(request_id)

    def _issue(self, client_id: int, arrival_s: float) -> Request | None:
        turn = self._turns_issued[client_id]
        if turn >= self.turns:
            return None
        self._turns_issued[client_id] = turn + 1
        draw = client_id * self.turns + turn
        user, answer = int(self._prompt_tokens[draw]), int(self._output_tokens[draw])
        prompt = self._context_tokens[client_id] + user
        self._context_tokens[client_id] = prompt + answer
        request_id = self.num_issued
        self._client_of.append(client_id)
        return Request(request_id, float(arrival_s), prompt, answer,
                       prefix_hash_ids=self._stream_ids(client_id, prompt + answer),
                       prefix_block_tokens=GENERATED_BLOCK_TOKENS)

    def _stream_ids(self, session: int, num_tokens: int) -> tuple[int, ...]:
        shared = self._prefix_ids[session]
        base = SESSION_ID_BASE + session * BLOCKS_PER_STREAM
        num_blocks = -(-num_tokens // GENERATED_BLOCK_TOKENS)
        return shared + tuple(range(base + len(shared), base + num_blocks))
