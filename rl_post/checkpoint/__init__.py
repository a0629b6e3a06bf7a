"""Orbax-backed checkpointing: save, resume, fall back past corrupt steps."""

from rl_post.checkpoint.manager import CheckpointManager, CorruptCheckpointError

__all__ = ["CheckpointManager", "CorruptCheckpointError"]
