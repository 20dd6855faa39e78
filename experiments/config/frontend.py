"""The `frontend:` block: the serving front end between client and engine (simulator/frontend.py)."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from experiments.config.base import _Strict
from simulator.frontend import DEFAULT_OUTPUT_MS, DEFAULT_REQUEST_MS, DEFAULT_TOKENIZE_US_PER_TOKEN, MAX_DELAY_S

_FrontendMs = Annotated[float, Field(ge=0, le=MAX_DELAY_S * 1e3, allow_inf_nan=False)]


class FrontendConfig(_Strict):
    """The serving front end between client and engine (`simulator/frontend.py`): vLLM's OpenAI API
    server. `enabled` None: on for scheduler vllm_v1 (the engine whose server it models), off for
    the others; a cluster (prefill/decode pools) takes none. The defaults are the medians of
    BLIS's published vLLM coefficients before the engine and 0 for the output path (simulator/frontend.py);
    0 zeroes a term. Out of range or
    not a finite number: a config error naming the file and key."""

    enabled: bool | None = None  # null: on for scheduler vllm_v1 (vLLM's API server), off for the others and with cluster:
    request_ms: _FrontendMs = DEFAULT_REQUEST_MS  # per request: API server handling and the hop to the engine core
    tokenize_us_per_token: Annotated[float, Field(ge=0, le=1_000, allow_inf_nan=False)] = DEFAULT_TOKENIZE_US_PER_TOKEN  # per prompt token
    output_ms: _FrontendMs = DEFAULT_OUTPUT_MS  # per token: engine core to client (output hop, detokenization, streaming)
