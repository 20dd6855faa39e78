"""Sweeps and capacity planning: running the points of a config, the SLO capacity search, the
results cache, execution backends, reports and the `vllm serve` flags of a chosen point."""
