"""What every record model is made of: a closed base class, field helpers, registered names, and reading a
document into its model.

A record is a document: written atomically by one machine and version, read by another. So a record is read in
two steps, in this order: its JSON Schema (``schemas/v1``, generated from these models) checks the bytes as
they are, and only a document that passes is read into its model (:func:`parse`, :func:`read`). Code then
reads fields as attributes; the same models write the documents back (:func:`dump`).

``optional(...)`` marks a key that may be absent (older records): it is left out when written, never ``null``.
``X | None`` with :func:`field` marks a key that is always present and may be ``null``.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from harness.registry import kind_names

SHA256 = "^[0-9a-f]{64}$"
UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
PROFILE_NAME = r"^[a-z0-9][a-z0-9.-]*$"
RECIPE_NAME = r"^[a-z0-9_]+$"  # a recipe id: also a file and directory name (recipes/, baselines/)
MAX_STEPS = 10_000_000


class Record(BaseModel):
    """A closed object: unknown keys are errors; read-only once built."""

    model_config = ConfigDict(extra="forbid", frozen=True)


R = TypeVar("R", bound=BaseModel)


def field(desc: str, *, over: bool = False, extra: dict[str, Any] | None = None, **kw: Any) -> Any:
    """A required field with its description; ``over``: ``--set`` may change it (``x-overridable``)."""
    schema_extra = {**({"x-overridable": True} if over else {}), **(extra or {})}
    return Field(description=desc, json_schema_extra=schema_extra or None, **kw)


def _absent(value: Any) -> bool:
    return value is None


def optional(desc: str, **kw: Any) -> Any:
    """A key that may be absent (never null: left out when written; numeric bounds go on the type:
    ``Annotated[float, Field(ge=0)]``)."""
    return Field(None, description=desc, exclude_if=_absent, **kw)


def sha(desc: str) -> Any:
    return field(desc, pattern=SHA256)


def utc(desc: str) -> Any:
    return field(desc, pattern=UTC)


@dataclass(frozen=True)
class Registered:
    """``Annotated[str, Registered(kind)]``: a name from a registry (:func:`harness.registry.kind_names`); the
    schema lists the registered names."""

    kind: str

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(schema), "enum": kind_names(self.kind)}

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        def known(name: str) -> str:
            names = kind_names(self.kind)
            if name not in names:
                raise ValueError(f"{name!r} is not a registered {self.kind}; use one of " + ", ".join(names))
            return name

        return core_schema.no_info_after_validator_function(known, handler(source))


def parse(doc: Any, model: type[R], schema: str, file: str) -> R:
    """``doc`` checked against ``schemas/v1/<schema>.schema.json`` (:class:`harness.schema.SchemaErrors`, one
    line, when it fails), then read into ``model``."""
    from harness.schema import check

    check(doc, schema, file)
    return model.model_validate(doc)


_READ: OrderedDict[tuple[type[BaseModel], str, str], BaseModel] = OrderedDict()
READ_MEMO = 16  # records kept per process: a run reads its baseline three times (plan, judge, report)


def read(path: str | os.PathLike[str], model: type[R], schema: str) -> R:
    """A record file: strictly parsed JSON, checked by its schema, read into ``model``.

    The last :data:`READ_MEMO` records read in this process are kept by the SHA-256 of their bytes: the same
    bytes again give a deep copy of the record they gave (checked once), other bytes are read afresh."""
    from harness.jsonio import JSON_LIMIT, decode_utf8, loads_strict, read_bytes_limited

    data = read_bytes_limited(path, JSON_LIMIT, what="JSON file")
    key = (model, schema, hashlib.sha256(data).hexdigest())
    if key in _READ:
        _READ.move_to_end(key)
    else:
        _READ[key] = parse(loads_strict(decode_utf8(data, str(path)), str(path)), model, schema, str(path))
        while len(_READ) > READ_MEMO:
            _READ.popitem(last=False)
    return cast(R, _READ[key].model_copy(deep=True))


def dump(record: BaseModel) -> dict[str, Any]:
    """The document of ``record`` (JSON types, aliases, absent optional keys left out)."""
    return record.model_dump(mode="json", by_alias=True)
