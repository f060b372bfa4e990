"""The records: every document the harness writes and reads back, one typed model each.

- :mod:`~harness.records.run` — a run's ``manifest.json`` and each checkpoint's ``trainer-state.json``;
- :mod:`~harness.records.baseline` — ``baselines/<recipe>/<profile>-<scale>.json``;
- :mod:`~harness.records.verdict` — a run's ``verdict.json``, its checks;
- :mod:`~harness.records.gate` — ``gate.json``, the verdicts of a gate;
- :mod:`~harness.records.certificate` — certification suites and certificates.

The models are the source of ``schemas/v1`` (:mod:`harness.config.schema_defs`), what ``run/`` writes and what
``judge/``, the report, the gate and certification read. Records sit beside the layers (config → core → run →
judge): any layer may use them, and they import none of the layers (registered names are looked up lazily,
:func:`harness.registry.kind_names`). A document from another machine or version is checked by its JSON Schema
before it is read into its model (:func:`~harness.records.base.read`).
"""
