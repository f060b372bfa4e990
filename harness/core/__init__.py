"""The GRPO training core: models → data → rollout → reward → advantage/loss → update."""
