"""Orbax-backed checkpointing: save, resume, fall back past corrupt steps."""

from rl_post.checkpoint.manager import (CheckpointManager, CheckpointMismatchError,
                                        CorruptCheckpointError)

__all__ = ["CheckpointManager", "CheckpointMismatchError", "CorruptCheckpointError"]
