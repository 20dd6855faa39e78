"""Pure scheduling policy: no SimPy, no torch, no clock. Shared by the simulator and gpu_engine.

`make_scheduler(name, config)` is the one place that maps a scheduler name to its class.
"""
from simulator.scheduler.base import Scheduler
from simulator.scheduler.block_manager import BlockManager, blocks_for
from simulator.scheduler.config import SchedulerConfig
from simulator.scheduler.plan import (
    COMPLETED,
    FINISH_REASONS,
    REJECTED_BUDGET,
    REJECTED_KV_CAPACITY,
    REJECTED_TOO_LONG,
    TRUNCATED,
    BatchPlan,
    FinishedRequest,
    ScheduledSequence,
    StepOutcome,
)
from simulator.scheduler.fastgen import FastGenScheduler
from simulator.scheduler.faster_transformer import FasterTransformerScheduler
from simulator.scheduler.orca import OrcaScheduler
from simulator.scheduler.sarathi import SarathiScheduler
from simulator.scheduler.sequence import Sequence
from simulator.scheduler.simple_chunking import SimpleChunkingScheduler
from simulator.scheduler.vllm_v0 import VllmV0Scheduler
from simulator.scheduler.vllm_v1 import VllmV1Scheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (VllmV0Scheduler, VllmV1Scheduler, OrcaScheduler, FasterTransformerScheduler,
                SarathiScheduler, SimpleChunkingScheduler, FastGenScheduler)
}


def make_scheduler(name: str, config: SchedulerConfig) -> Scheduler:
    """Build the scheduler called `name`.

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    try:
        cls = SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; valid: {', '.join(sorted(SCHEDULERS))}") from None
    return cls(config)


__all__ = [
    "BatchPlan", "BlockManager", "COMPLETED", "FINISH_REASONS", "FinishedRequest", "REJECTED_BUDGET",
    "REJECTED_KV_CAPACITY", "REJECTED_TOO_LONG", "SCHEDULERS", "SarathiScheduler", "ScheduledSequence",
    "Scheduler", "SchedulerConfig", "Sequence", "StepOutcome", "TRUNCATED", "VllmV0Scheduler",
    "blocks_for", "make_scheduler",
]
