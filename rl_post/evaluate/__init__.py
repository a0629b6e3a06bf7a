"""Evaluating stored checkpoints of every kind: `checkpoint_eval` (the held-out set)
and `scan` (the learnability scan over domains and levels).

Above `rl` in the import layers (docs/architecture.md): restoring a training
workdir needs its RL algorithm's config and critic state (`rl.config`,
`rl.critic`). What they compute (completion rate, pass@k, Wilson intervals,
the Markdown reports) lives below, in `rl_post.eval`.
"""
