"""Built-in workload profiles (`*.json`): figures derived from public traces by `build_profiles`."""
