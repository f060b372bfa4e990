"""``harness plan``: one GRPO step of a recipe traced at full size on fake ranks, judged against the profile.

- :mod:`harness.plan.tracker`: live bytes by category and phase, collectives, placeholder scalars.
- :mod:`harness.plan.trace`: the step, through the run's own code, on a fake process group.
- :mod:`harness.plan.estimate`: the profile's memory and a step-time estimate from its declared rates.
"""
