"""The typed hardware profile and the recipe file around the typed recipe: pydantic models, the source of
``schemas/v1/{recipe,profile}.schema.json`` (the resolved recipe itself is :mod:`harness.core.typed_recipe`).

A recipe file is the engine's :class:`~harness.core.typed_recipe.Recipe` plus its ``scales`` and ``profiles``:
deep-merge patches, checked by validating the merged result.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from harness.core.typed_recipe import Recipe, Section
from harness.records.base import PROFILE_NAME, Registered, field, optional
from harness.records.common import Interconnect

PATCH = {"type": "object", "description": "A deep-merge patch: any object; checked by validating the merged result."}
SCALES = {
    "type": "object", "description": "Scale name → patch deep-merged over the recipe (full = as published).",
    "properties": {"full": {**PATCH, "description": "Published scale (usually empty)."},
                   "smoke": {**PATCH, "description": "Same family, shrunk to run GRPO on a 2-core CPU in about a "
                                                     "minute."}},
    "required": ["full", "smoke"],
    "additionalProperties": {**PATCH, "description": "Another named scale."},
}
PROFILES = {
    "type": "object", "description": "Hardware profile → {scale → patch}: the (profile, scale) pairs this recipe "
                                     "supports.",
    "propertyNames": {"pattern": PROFILE_NAME},
    "additionalProperties": {"type": "object", "minProperties": 1, "description": "Scale → settings patch for this "
                                                                                  "profile.",
                             "additionalProperties": {**PATCH, "description": "Settings for this profile at this "
                                                                              "scale."}},
    "minProperties": 1,
}


def _replace(schema: dict[str, Any]) -> Any:
    """``json_schema_extra`` that replaces a field's generated schema with ``schema``."""
    def apply(out: dict[str, Any]) -> None:
        out.clear()
        out.update(schema)
    return apply


class RecipeFile(Recipe):
    """A GRPO recipe."""

    scales: dict[str, dict[str, Any]] = Field(json_schema_extra=_replace(SCALES))
    profiles: dict[str, dict[str, dict[str, Any]]] = Field(json_schema_extra=_replace(PROFILES))


# ----------------------------------------------------------------------------- hardware profile
class Accelerator(Section):
    vendor: Literal["nvidia", "huawei", "none"] = field("Vendor.")
    model: str = field("Model name as the driver reports it (substring match).", min_length=1)
    count_per_node: int = field("Devices per node.", ge=1)
    memory_gb: float = field("Memory per device in GB (10^9 bytes); host RAM budget for cpu.", gt=0)
    peak_bf16_tflops: float = field("Dense bf16 peak per device (for MFU); measured or datasheet.", gt=0)
    memory_bandwidth_gbps: Annotated[float, Field(gt=0)] | None = optional(
        "Memory bandwidth per device in GB/s (datasheet; harness plan's step time).")


class Host(Section):
    cpu_cores: int = field("Cores (minimum expected).", ge=1)
    memory_gb: float = field("Host memory in GB.", gt=0)


class SoftwarePin(Section):
    driver: str | None = field("Accelerator driver version prefix.")
    runtime: str | None = field("CUDA / CANN version prefix.")


class ContainerImage(Section):
    kind: Literal["cpu", "cuda", "ascend"] = field("Image directory under images/.")
    reference: str = field("Image reference (tag@digest, or the local tag for the CPU image).", min_length=1)


class Profile(Section):
    """A hardware profile: one node type, described MLPerf-style."""

    schema_ref: str | SkipJsonSchema[None] = Field(None, alias="$schema", min_length=1,
                                                   description="Path or URI of this schema (editor hint).")
    name: str = field("Profile id (file name without .json).", pattern=PROFILE_NAME)
    description: str = field("What machine this is.", min_length=1)
    device_type: Annotated[str, Registered("device")] = field("torch device kind.")
    accelerator: Accelerator = field("Accelerators of one node.")
    nodes: int = field("Nodes this profile describes (a certification unit).", ge=1)
    interconnect: Interconnect = field("Links.")
    collective_backend: Literal["nccl", "hccl", "gloo"] = field("torch.distributed backend.")
    host: Host = field("Host side of one node.")
    software: SoftwarePin = field("Stack the profile is certified with (null = not checked).")
    container_image: ContainerImage = field("Pinned image the profile runs in.")
    sources: list[Annotated[str, Field(min_length=1)]] | None = optional(
        "Where the declared rates (peak FLOP/s, memory and link bandwidths) come from.")
    reference_profile: str | None = optional(
        "A one-device profile whose baselines judge this profile's runs where it has none of its own: the run "
        "replays that baseline's recorded rollouts (teacher-forced), so only the training side is compared, "
        "across world sizes and devices.", pattern=PROFILE_NAME)
