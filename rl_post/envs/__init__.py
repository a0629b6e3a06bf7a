"""Multi-turn tool use: environments, sandboxed tools, the episode loop (docs/envs.md).

Public API: `Env`, `SingleTurnEnv` (base), `Tool`, `ToolLimits`,
`Workspace` and the tool registry (`tools`: `make_tool`, `toolset`),
`EnvDomain` and the domain registry (`domains`: `make_domain`, `make_env`,
`DOMAINS`), `run_episodes`, `EpisodeConfig` (episodes), `EpisodeMetrics`.
Tools and domains load by registered name or "module:Class".
"""
