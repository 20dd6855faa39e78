"""The serving front end between a client and vLLM's engine core: what a user's TTFT holds that the
engine's does not.

A request to vLLM's OpenAI-compatible server (`vllm serve`) crosses, before the engine core sees it:
the API server's HTTP and OpenAI request handling (`vllm/entrypoints/openai/`, FastAPI + uvicorn),
tokenization of the prompt (`InputProcessor.process_inputs`, in the API server process), and the hop
to the engine-core process (`AsyncLLM.add_request` -> `EngineCoreClient`, msgpack over ZMQ, decoded by
the engine core's input thread, added by `EngineCore._process_input_queue` between steps). Each token
it emits crosses back: the engine core's output thread (msgpack over ZMQ), `AsyncLLM`'s output
handler and `OutputProcessor.process_outputs` (incremental detokenization, per-request queues), the
OpenAI streaming generator (one SSE chunk per token) and the socket to the client
(vllm/v1/engine/async_llm.py, vllm/v1/engine/output_processor.py; read at vllm-project/vllm 00080ee).

Modelled as fixed delays, outside the engine's clock: a request reaches the engine
`in_s(prompt_tokens)` after the client sent it, and each token reaches the client `output_s`
after the step that emitted it ended. So client TTFT = engine TTFT + in + out, client E2E = engine
E2E + in + out, and ITL / TPOT are the engine's (a constant shift of every token). The front end is
taken never to saturate: one API-server process handles every request's tokens, and at very high
token rates it becomes the bottleneck (vLLM's `--api-server-count`); that queueing is not modelled.

Default constants (`FrontEnd.vllm_default()`): the time before the engine's queue is the medians of
BLIS's published vLLM coefficients (inference-sim/inference-sim `defaults.yaml`, commit 1a6eb35: 33
fits of real vLLM 0.8.4 / 0.10.1 runs on H100 and A100-80GB, 8B-120B models, TP 1-8, each fitted to
that run's client-side TTFT, ITL and E2E): alpha0, the fixed time a request spends before the engine's
queue (`getQueueingTime`), median 4.27 ms; alpha1, per prompt token, median 3.5 µs (cross-check:
Hugging Face fast-tokenizer encode measured at 10-21 µs a token for 131-token prompts including the
call's fixed cost, tenstorrent/tt-inference-server issue 2173; a few µs a token for long prompts). The
output path defaults to 0: no public measurement separates it (BLIS's alpha2 is added to every ITL
as well as to TTFT and is fitted jointly with its step-time model, so it is not this delay, and this
simulator's ITL comes from measured kernels). None is fitted to any run this project verifies
against; set them per deployment in `frontend:` (`output_ms` where the client's own measurement of
the output path is known).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# BLIS defaults.yaml medians (module docstring), in the units a config gives them.
DEFAULT_REQUEST_MS = 4.27
DEFAULT_TOKENIZE_US_PER_TOKEN = 3.5
DEFAULT_OUTPUT_MS = 0.0  # module docstring: not measured apart from ITL
MAX_DELAY_S = 60.0  # a front-end delay above a minute is a unit mistake, not a server


@dataclass(frozen=True)
class FrontEnd:
    """Fixed front-end delays of one deployment (module docstring).

    Attributes:
        request_s: API-server request handling and the hop to the engine core, per request (s).
        tokenize_s_per_token: prompt tokenization, per prompt token (s).
        output_s: engine core to client for each emitted token (output hop, detokenization,
            streaming), per token (s); a token's client time is its step's end plus this.

    Raises:
        ValueError: a negative, non-finite or implausibly large (> 60 s) delay.
    """

    request_s: float = 0.0
    tokenize_s_per_token: float = 0.0
    output_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("request_s", "tokenize_s_per_token", "output_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 <= value <= MAX_DELAY_S:
                raise ValueError(f"FrontEnd.{name} must be a finite number of seconds in [0, {MAX_DELAY_S:g}], "
                                 f"got {value!r}")

    @classmethod
    def from_config_units(cls, request_ms: float, tokenize_us_per_token: float, output_ms: float) -> "FrontEnd":
        """The front end of a `frontend:` section (ms, µs per token, ms)."""
        return cls(request_ms / 1e3, tokenize_us_per_token / 1e6, output_ms / 1e3)

    @classmethod
    def vllm_default(cls) -> "FrontEnd":
        """vLLM's OpenAI API server with the published medians (module docstring)."""
        return cls.from_config_units(DEFAULT_REQUEST_MS, DEFAULT_TOKENIZE_US_PER_TOKEN, DEFAULT_OUTPUT_MS)

    def in_s(self, prompt_tokens):
        """Client send -> engine arrival (s) of requests of `prompt_tokens` tokens (an int or an
        int array; the same float operations either way, so a request's engine arrival computed
        when it is dispatched equals the one its record is given)."""
        return self.request_s + self.tokenize_s_per_token * prompt_tokens


def engine_arrival_s(arrival_s, prompt_tokens, frontend: FrontEnd | None):
    """When requests sent by the client at `arrival_s` reach the engine (scalars or arrays):
    `arrival_s + frontend.in_s(prompt_tokens)`, or `arrival_s` itself without a front end."""
    if frontend is None:
        return arrival_s
    return arrival_s + frontend.in_s(np.asarray(prompt_tokens, dtype=np.float64)
                                     if isinstance(prompt_tokens, np.ndarray) else prompt_tokens)
