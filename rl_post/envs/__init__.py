"""Multi-turn tool use: environments, sandboxed tools, the episode loop (docs/envs.md).

Public API: `Env`, `SingleTurnEnv` (base), `ToolLimits`, `Workspace`
(tools), `run_episodes`, `EpisodeConfig` (episodes), `EpisodeMetrics`,
and `rl_post.envs.domains.make_env` for the multi-step domains.
"""
