"""The demo's orchestration: its stages, its runs over seeds and the tables and plots
that compare its arms.

`pipeline.run` is what `experiments/demo.py` and colab/quickstart.ipynb run
(tokenizer -> SFT -> GRPO against an SFT control, or `pipeline_pretrained`
from a pretrained model against an RFT control); `seed_runs.run` is
`experiments/demo_seeds.py`. `demo_tables`, `seeds`, `seed_plots`,
`heldout_curve` and `rollout_trend` turn the runs' files into the demo's
tables and plots. Imported as `experiments.demo.<name>` from the repository
root (the scripts put it on sys.path). Everything a run of the library needs
(trainers, evaluation, the per-run report) lives in `rl_post`; nothing here is
imported by it.
"""
