"""Token sampling from logits: greedy (argmax) by default, temperature sampling optional."""
from __future__ import annotations

import torch


class Sampler:
    """Picks one token per logits row.

    Args:
        temperature: 0 for greedy (argmax); > 0 samples softmax(logits / temperature).
        seed: seeds the sampling generator (one per device), so sampled runs are reproducible.

    Raises:
        ValueError: a negative temperature.
    """

    def __init__(self, temperature: float = 0.0, seed: int = 0):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.temperature = temperature
        self.seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def __call__(self, logits: torch.Tensor) -> list[int]:
        """Token ids, one per row of `logits` (n, vocab); one device-to-host copy."""
        if len(logits) == 0:
            return []
        if self.temperature == 0:
            return logits.argmax(dim=-1).tolist()
        probs = torch.softmax(logits / self.temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=self._generator(logits.device)).squeeze(-1).tolist()

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[device]
