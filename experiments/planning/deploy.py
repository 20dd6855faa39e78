"""Deploy commands of a layout: a `vllm serve` line per instance, GPUs and ports assigned, and for a
prefill/decode cluster the KV connector and the router in front.

A disaggregated layout follows vLLM's own P/D test harness
(`tests/v1/kv_connector/nixl_integration/run_accuracy_test.sh`, vLLM 0.19): every prefill and
decode instance is `vllm serve` with `--kv-transfer-config '{"kv_connector":"NixlConnector",
"kv_role":"kv_both"}'`, its own `VLLM_NIXL_SIDE_CHANNEL_PORT`, prefill ports from 8100 and decode
ports from 8200, and `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py` routes each
request to a prefill instance and then a decode instance (`--prefiller-hosts/--prefiller-ports`,
`--decoder-hosts/--decoder-ports`). That proxy is vLLM's test harness, not a production router:
the commands say so. A colocated layout is one `vllm serve` per replica (ports from 8000) behind the
router the point was simulated with.
"""
from __future__ import annotations

import shlex

from experiments.config import SweepConfig, engine_gpus, pool_point
from experiments.planning.vllm_flags import vllm_serve_command

NIXL_KV_TRANSFER = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
PREFILL_PORT, DECODE_PORT, COLOCATED_PORT = 8100, 8200, 8000
PREFILL_SIDE_CHANNEL, DECODE_SIDE_CHANNEL = 5559, 5659  # run_accuracy_test.sh's bases


def deploy_commands(point: SweepConfig) -> list[str]:
    """Shell lines that start the point's layout on one host with enough GPUs, in order.

    Raises:
        ValueError: a model with no known repository (`vllm_model_argument`)."""
    if point.cluster is None:
        return _colocated(point)
    lines, gpu = [], 0
    ports = {}
    for pool, port, side in (("prefill", PREFILL_PORT, PREFILL_SIDE_CHANNEL),
                             ("decode", DECODE_PORT, DECODE_SIDE_CHANNEL)):
        served = pool_point(point, pool)
        per_instance = engine_gpus(served.engine) // served.engine.replicas
        command = vllm_serve_command(served.model_copy(update={"engine": served.engine.model_copy(
            update={"replicas": 1})}))
        ports[pool] = []
        for i in range(served.engine.replicas):
            gpus = ",".join(str(g) for g in range(gpu, gpu + per_instance))
            gpu += per_instance
            ports[pool].append(port + i)
            lines.append(f"CUDA_VISIBLE_DEVICES={gpus} VLLM_NIXL_SIDE_CHANNEL_PORT={side + i * per_instance} "
                         f"{command} --port {port + i} --kv-transfer-config {shlex.quote(NIXL_KV_TRANSFER)} &")
    lines.append("# router (vLLM's P/D test proxy, tests/v1/kv_connector/nixl_integration/toy_proxy_server.py; use "
                 "a production router such as llm-d or Dynamo in service):")
    lines.append("python3 toy_proxy_server.py --port 8000 "
                 f"--prefiller-hosts {' '.join(['localhost'] * len(ports['prefill']))} "
                 f"--prefiller-ports {' '.join(map(str, ports['prefill']))} "
                 f"--decoder-hosts {' '.join(['localhost'] * len(ports['decode']))} "
                 f"--decoder-ports {' '.join(map(str, ports['decode']))}")
    return lines


def _colocated(point: SweepConfig) -> list[str]:
    e = point.engine
    per_instance = engine_gpus(e) // e.replicas
    single = vllm_serve_command(point.model_copy(update={"engine": e.model_copy(update={"replicas": 1})}))
    lines = [f"CUDA_VISIBLE_DEVICES={','.join(str(g) for g in range(i * per_instance, (i + 1) * per_instance))} "
             f"{single} --port {COLOCATED_PORT + 1 + i} &" for i in range(e.replicas)]
    if e.replicas > 1:
        lines.append(f"# router: a {e.router} load balancer on port {COLOCATED_PORT} over ports "
                     f"{COLOCATED_PORT + 1}–{COLOCATED_PORT + e.replicas} (the policy the simulation used)")
    else:
        lines[0] = lines[0].replace(f"--port {COLOCATED_PORT + 1}", f"--port {COLOCATED_PORT}")
    return lines

