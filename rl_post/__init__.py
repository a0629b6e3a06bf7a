"""rl_post: JAX-native post-training of language models with RL on verifiable rewards."""
