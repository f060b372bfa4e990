"""GRPO reproducibility harness: recipes → runs → metrics → verdicts against recorded baselines."""

__version__ = "0.1.0"
