"""The base of every response body (every field always present), its times, and strings that match a pattern."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Annotated, Any, overload

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic_core import PydanticCustomError


class Body(BaseModel):
    """A JSON body the server answers."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


@overload
def utc(moment: datetime) -> datetime: ...
@overload
def utc(moment: None) -> None: ...
def utc(moment: datetime | None) -> datetime | None:
    """Return a time in UTC (SQLite gives naive datetimes back): a `date-time` of RFC 3339 has its zone."""
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def matching(pattern: str) -> Any:
    """Return the type of a string that must match `pattern` (whole), as `Field(pattern=)` says it.

    Checked by Python's `re`, which compiles it on first use and keeps it: pydantic-core
    compiles a `Field(pattern=)` when its model is defined, and a Unicode `\\w{0,99}` takes it 50-180 ms, so a handful of
    them cost every CLI call and server start half a second or more. The error and the JSON
    schema are those of `Field(pattern=)`.
    """

    def check(value: str) -> str:
        if re.fullmatch(pattern, value) is None:  # re keeps the compiled pattern
            raise PydanticCustomError(
                "string_pattern_mismatch", "String should match pattern '{pattern}'", {"pattern": pattern}
            )
        return value

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string", "pattern": pattern})]
