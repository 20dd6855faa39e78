"""The simulator checked against real engines: calibration (profile + fit + engine overhead),
per-step and end-to-end comparisons, fidelity reports and the readers of engine results
(the project's own engine runs, `vllm bench serve` results)."""
