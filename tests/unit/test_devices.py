"""The device-kinds table is the one place a kind is described: schemas, collectives, containers and the
device helpers all answer from it."""

from __future__ import annotations

import pytest
import torch

from harness.core import device as D
from harness.devices import DEVICE_KINDS, accelerators, device_names
from harness.errors import HarnessError
from harness.schema import load_schema


def test_the_schemas_enumerate_the_table():
    recipe, profile = load_schema("recipe"), load_schema("profile")
    assert recipe["properties"]["trainer"]["properties"]["device"]["enum"] == device_names()
    assert profile["properties"]["device_type"]["enum"] == device_names()


def test_every_kind_names_its_backend_image_and_container():
    assert {k: (v.backend, v.image, v.container) for k, v in DEVICE_KINDS.items()} == {
        "cpu": ("gloo", "cpu", "none"), "cuda": ("nccl", "cuda", "nvidia"), "npu": ("hccl", "ascend", "ascend")}
    assert [k.name for k in accelerators()] == ["cuda", "npu"]


def test_an_unknown_or_absent_device_is_one_line():
    with pytest.raises(HarnessError, match="unknown device kind 'tpu'; valid names: cpu, cuda, npu"):
        D.resolve_device("tpu")
    assert D.resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="asks for cuda but torch sees no such device"):
            D.resolve_device("cuda")
    with pytest.raises(HarnessError, match="torch_npu is not installed"):
        D.resolve_device("npu")
