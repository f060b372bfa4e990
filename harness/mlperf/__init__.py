"""MLPerf Training-format logs and system descriptions.

Every run writes ``mlperf.log`` beside ``metrics.jsonl``: ``:::MLLOG {…}`` lines written by
mlperf-logging's own ``mllog`` (so MLPerf's compliance checker and its tools read them). Events:

- at the start (the run record is opened): ``cache_clear``, ``init_start``, the submission keys
  (benchmark ``grpo_<recipe>_<scale>``, division closed, org ``grpo-harness``, platform = the
  hardware profile), the run's constants (:func:`run_constants`: global batch size, prompts and
  generations per step, sequence length, optimizer hyper-parameters, precision, parallelism,
  samples), ``seed`` and ``max_steps``;
- before the first step: ``init_stop``, ``run_start``;
- per step: ``epoch_start`` / ``epoch_stop`` (``epoch_num`` = step, ``samples_count`` = prompts ×
  generations so far; the start is back-dated by the step's measured ``timing_s/step``) and, after a
  validation, ``eval_start`` / ``eval_accuracy`` (the mean of ``val-core/*/reward/mean``) /
  ``eval_stop``;
- at the end: ``run_stop`` with ``status`` ``success`` (the benchmark's convergence target was
  reached; :mod:`harness.mlperf.rules`), ``aborted`` (finished below it) or the run's failure.

Writing the log only reads clocks and the metrics already computed: no RNG, no tensor work, so the
training numerics are unchanged. A resumed run's log is cut back to the checkpoint's step and
continued. ``system-description.json`` (MLPerf's system description fields) is written by
``harness certify`` from the certificate's ``system`` block (:func:`system_description`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from harness.jsonio import write_text_atomic
from harness.paths import ROOT

LOG_FILE = "mlperf.log"
SYSTEM_DESC_FILE = "system-description.json"
RULESET = "6.1.0"
ORG = "grpo-harness"
EVAL_PREFIX, EVAL_SUFFIX = "val-core/", "/reward/mean"


def benchmark_name(recipe: str, scale: str) -> str:
    return f"grpo_{recipe}_{scale}"


def _precision(dtype: str) -> str:
    return {"bfloat16": "bfloat16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)


def run_constants(config: dict[str, Any]) -> dict[str, Any]:
    """The MLPerf keys a resolved recipe fixes, in log order (the rules pin each one)."""
    arr = config["actor_rollout_ref"]
    actor, rollout, optim = arr["actor"], arr["rollout"], arr["actor"]["optim"]
    engine = actor.get(actor["strategy"]) if isinstance(actor.get(actor["strategy"]), dict) else {}
    t = config["trainer"]
    world = t["nnodes"] * t["n_gpus_per_node"]
    prompts, n = config["data"]["train_batch_size"], rollout["n"]
    micro = actor.get("ppo_micro_batch_size_per_gpu") or 1
    synthetic = config["data"].get("synthetic") or {}
    precision = _precision(config["model"]["dtype"])
    return {
        "global_batch_size": prompts * n,
        "num_prompts_per_step": prompts,
        "num_generations_per_prompt": n,
        "max_sequence_length": config["data"]["max_prompt_length"] + config["data"]["max_response_length"],
        "gradient_accumulation_steps": max(1, actor["ppo_mini_batch_size"] * n // (micro * world)),
        "micro_batch_size": micro,
        "opt_name": "adamw",
        "opt_base_learning_rate": optim["lr"],
        "opt_adamw_beta_1": optim["betas"][0],
        "opt_adamw_beta_2": optim["betas"][1],
        "opt_adamw_weight_decay": optim["weight_decay"],
        "opt_gradient_clip_norm": optim["clip_grad"],
        "opt_learning_rate_warmup_steps": max(0, optim["lr_warmup_steps"]),
        "opt_learning_rate_decay_schedule": optim["lr_scheduler_type"],
        "generation_training_rollout_temperature": rollout["temperature"],
        "generation_training_rollout_top_p": rollout["top_p"],
        "lowest_numerical_precision_in_linear": precision,
        "lowest_numerical_precision_in_attn": precision,
        "lowest_numerical_precision_in_comm": precision,
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": int(engine.get("ulysses_parallel_size") or 1),
        "expert_parallelism": int(engine.get("expert_parallel_size") or 1),
        "train_samples": synthetic.get("train_size"),
        "eval_samples": synthetic.get("val_size"),
    }


def eval_accuracy(metrics: dict[str, Any]) -> float | None:
    vals = [v for k, v in metrics.items() if k.startswith(EVAL_PREFIX) and k.endswith(EVAL_SUFFIX)]
    return sum(vals) / len(vals) if vals else None


class _LineHandler(logging.Handler):
    """Appends each record as one line, flushed and fsynced (the run directory's durability rule)."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        self.fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def emit(self, record: logging.LogRecord) -> None:
        self.fh.write(self.format(record) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()
        super().close()


class MlperfLog:
    """The ``mlperf.log`` of one run (rank 0)."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], *, resume_from: int | None = None) -> None:
        from mlperf_logging.mllog import constants, mllog

        from harness.mlperf.rules import convergence_target

        self.path = Path(run_dir) / LOG_FILE
        self.constants = run_constants(manifest["resolved_config"])
        self.target = convergence_target(manifest["recipe"]["name"], manifest["scale"])
        kept: set[str] = set()
        self.reached = False
        if resume_from is not None:
            kept, self.reached = cut_back(self.path, resume_from, self.target)
        self.started = "run_start" in kept
        logger = logging.Logger(f"harness.mlperf.{id(self)}")  # not registered: one per run, no global state
        self.handler = _LineHandler(self.path)
        logger.addHandler(self.handler)
        self.log = mllog.MLLogger(logger=logger, default_stack_offset=1, root_dir=str(ROOT))
        self.c = constants
        if resume_from is not None:
            return
        self.log.event(key=self.c.CACHE_CLEAR, value=True)
        self.log.start(key=self.c.INIT_START)
        for key, value in (("submission_benchmark", benchmark_name(manifest["recipe"]["name"], manifest["scale"])),
                           ("submission_division", "closed"), ("submission_org", ORG),
                           ("submission_platform", manifest["profile"]), ("submission_status", "research"),
                           ("config_filename", manifest["recipe"]["path"])):
            self.log.event(key=key, value=value)
        for key, value in self.constants.items():
            self.log.event(key=key, value=value)
        self.log.event(key=self.c.SEED, value=manifest["seed"])
        self.log.event(key="max_steps", value=manifest["steps"]["requested"])
        self.log.event(key="init_checkpoint_step", value=0)

    def run_start(self) -> None:
        """Initialisation is over, training begins (once per log: a resumed run's is kept)."""
        if not self.started:
            self.log.end(key=self.c.INIT_STOP)
            self.log.start(key=self.c.RUN_START)
            self.started = True

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        now = int(time.time() * 1e3)
        samples = step * self.constants["global_batch_size"]
        meta = {"epoch_num": step, "samples_count": samples}
        took = metrics.get("timing_s/step")
        start = now - int(took * 1e3) if isinstance(took, (int, float)) and took == took else now
        self.log.start(key=self.c.EPOCH_START, metadata=meta, time_ms=start)
        self.log.end(key=self.c.EPOCH_STOP, metadata=meta, time_ms=now)
        acc = eval_accuracy(metrics)
        if acc is not None:
            self.log.start(key=self.c.EVAL_START, metadata=meta)
            self.log.event(key=self.c.EVAL_ACCURACY, value=acc, metadata=meta)
            self.log.end(key=self.c.EVAL_STOP, metadata=meta)
            self.reached = self.reached or (self.target is not None and acc >= self.target)

    def finish(self, status: str) -> None:
        """``status``: the run record's (complete | failed | interrupted)."""
        mlperf_status = ("success" if self.reached else "aborted") if status == "complete" else status
        self.log.end(key=self.c.RUN_STOP, metadata={"status": mlperf_status})
        self.handler.close()


def cut_back(path: Path, step: int, target: float | None) -> tuple[set[str], bool]:
    """Keep the log up to ``step`` (the resumed checkpoint): (the keys kept, whether a kept evaluation
    reached ``target``)."""
    if not path.is_file():
        return set(), False
    kept, keys, reached = [], set(), False
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        try:
            ev = json.loads(line.split(":::MLLOG ", 1)[1])
        except (IndexError, ValueError):
            continue  # a torn last line
        meta = ev.get("metadata") or {}
        if ev.get("key") == "run_stop" or meta.get("epoch_num", 0) > step:
            continue
        if ev.get("key") == "eval_accuracy" and target is not None and ev.get("value", 0) >= target:
            reached = True
        kept.append(line if line.endswith("\n") else line + "\n")
        keys.add(ev.get("key"))
    write_text_atomic(path, "".join(kept))
    return keys, reached


def system_description(doc: dict[str, Any]) -> dict[str, Any]:
    """MLPerf's system description JSON from a certificate document (its ``system`` and profile)."""
    s = doc["system"]
    acc, host, sw = s["accelerator"], s["host"], s["software"]
    stack = ", ".join(f"{k} {v}" for k, v in sw.items() if v is not None and k not in ("threads", "cpu_capability"))
    return {
        "submitter": ORG,
        "division": "closed",
        "status": "research",
        "system_name": doc["profile"]["name"],
        "system_type": "datacenter",
        "number_of_nodes": s["nodes"],
        "host_processors_per_node": 1,
        "host_processor_model_name": sw.get("cpu_capability") or "unknown",
        "host_processor_core_count": host["cpu_cores"],
        "host_processor_vcpu_count": host["cpu_cores"],
        "host_memory_capacity": f"{host['memory_gb']:g} GB",
        "host_networking": s["interconnect"]["inter_node"],
        "accelerators_per_node": acc["count"],
        "accelerator_model_name": f"{acc['vendor']} {acc['model']}".strip(),
        "accelerator_memory_capacity": f"{acc['memory_gb']:g} GB",
        "accelerator_interconnect": s["interconnect"]["intra_node"],
        "framework": f"grpo-harness {doc['harness']['version']}, torch {sw.get('torch')}",
        "other_software_stack": stack,
        "operating_system": "Linux",
        "sw_notes": (f"runtime {s['runtime']['kind']}, collective backend {s['collective_backend']}; "
                     f"peak {acc['peak_bf16_tflops']:g} bf16 TFLOP/s per device (profile)"),
    }
