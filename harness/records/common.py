"""The pieces several records share: the software stack, overrides, fault injection, the harness source, and the
names records use (tiers and check groups come from the tiers registry, :mod:`harness.judge.tiers`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from harness.records.base import Record, Registered, field, optional

Status = Literal["running", "complete", "failed", "interrupted"]
Runtime = Literal["local", "docker", "torchrun"]
Tier = Annotated[str, Registered("tier")]
CheckGroup = Annotated[str, Registered("check-group")]
Dtype = Literal["float32", "bfloat16", "float16", "float64"]
Device = Annotated[str, Registered("device")]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


class Software(Record):
    python: str = field("Python version (platform.python_version()).", min_length=1)
    torch: str = field("torch.__version__ (includes the build, e.g. +cpu).", min_length=1)
    transformers: str = field("transformers version.", min_length=1)
    tokenizers: str = field("tokenizers version.", min_length=1)
    numpy: str = field("numpy version.", min_length=1)
    cuda: str | None = field("CUDA version torch was built with; null on CPU/NPU builds.")
    torch_npu: str | None = field("torch_npu version; null when not installed.")
    threads: int = field("torch intra-op threads (changes CPU reduction order).", ge=1)
    cpu_capability: str = field("CPU instruction set torch dispatches its kernels to "
                                "(torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, DEFAULT …); a different one "
                                "changes CPU bits.", min_length=1)
    cudnn: int | None = field("cuDNN version number; null when unavailable.", ge=0)


class Override(Record):
    """One override."""

    key: str = field("Dotted recipe key.", min_length=1)
    value: float | int | str | None = field("Typed value that was set.")
    source: str | SkipJsonSchema[None] = optional("Set by a launcher rather than a user's --set; absent for --set.",
                                                  min_length=1)


Overrides = Annotated[list[Override], Field(description="--set overrides applied on top of the recipe, in order.")]


class Fault(Record):
    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    flip_advantage: Literal[True] | SkipJsonSchema[None] = optional("Advantage sign flipped.", alias="flip-advantage")
    slowdown: Annotated[float, Field(ge=0, le=1)] | SkipJsonSchema[None] = optional(
        "Fraction of throughput taken away: each step sleeps x / (1 - x) of its own time.")


FAULT = ("Test-only fault injected through HARNESS_FAULT (null = none). A run with a fault is judged (so mutation "
         "tests work) and its verdict says so.")


class HarnessSource(Record):
    version: str = field("Package version.", min_length=1)
    revision: str | None = field("Git commit (or HARNESS_GIT_REVISION); null when unknown.")
    dirty: bool | None = field("Uncommitted changes to tracked files; null when unknown.")




class Interconnect(Record):
    intra_node: str = field("Device-to-device link within a node.", min_length=1)
    inter_node: str = field("Node-to-node network.", min_length=1)
    intra_node_gbps: Annotated[float, Field(gt=0)] | None = optional(
        "Collective bandwidth per device within a node, GB/s in one direction (harness plan's step time).")
    inter_node_gbps: Annotated[float, Field(gt=0)] | None = optional(
        "Collective bandwidth per device between nodes, GB/s in one direction (harness plan's step time).")
    host_link_gbps: Annotated[float, Field(gt=0)] | None = optional(
        "Host-to-device link per device, GB/s in one direction (offloaded state; harness plan's step time).")
