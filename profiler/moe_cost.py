"""Pricing mixture-of-experts models (issue 18): not wired yet, so an MoE point is refused."""
from __future__ import annotations


def build_moe_cost_model(point, model, device):
    """Raises ValueError: mixture-of-experts pricing is not available yet (naming the model)."""
    raise ValueError(f"model {model.name!r}: pricing mixture-of-experts models is not available yet")
