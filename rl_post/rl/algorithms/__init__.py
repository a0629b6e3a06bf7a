"""Built-in algorithms, one module per estimator family (see `rl_post.rl.registry`)."""
