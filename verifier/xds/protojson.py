"""Proto-JSON's scalar and well-known-type values, without any message class.

Shared by the message decoder (``verifier.xds.codec``, on envoy-data-plane) and the
records decoder (``verifier.xds.records``), which must read every value exactly
alike: importing envoy-data-plane is what the records decoder exists to avoid.
"""

from __future__ import annotations

import base64
import datetime
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from verifier.xds.layout import Json

DURATION: Final = re.compile(r"(-)?(\d+)(?:\.(\d{1,9}))?s")


def fraction(micros: int) -> str:
    """Protobuf prints 0, 3, 6 or 9 fractional digits; we hold microseconds at most."""
    digits = f"{micros:06d}"
    return "" if not micros else "." + (digits[:3] if digits.endswith("000") else digits)


def duration_to_json(value: datetime.timedelta) -> str:
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    seconds, frac = divmod(abs(micros), 1_000_000)
    return f"{'-' if micros < 0 else ''}{seconds}{fraction(frac)}s"


def duration_from_json(value: Json) -> datetime.timedelta:
    """Exact decimal parse; betterproto2 goes through float (``1.001s`` -> 1.000999s)."""
    if isinstance(value, Mapping):
        return duration_from_object(value)
    match = DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"invalid duration {value!r}")
    sign, seconds, frac = match.groups()
    micros = int((frac or "").ljust(9, "0")) // 1000
    delta = datetime.timedelta(seconds=int(seconds), microseconds=micros)
    return -delta if sign else delta


def duration_from_object(value: Mapping[str, Json]) -> datetime.timedelta:
    """The message form, ``{"seconds": 1, "nanos": 5000}``: Envoy's JSON parser takes
    it as well as ``"1.000005s"`` (measured with ``envoy --mode validate``, 1.40), so
    reading only the string form dropped a timeout Envoy applies. Same limits as the
    message: seconds within +-10,000 years, nanos under a second, one sign."""
    if not set(value) <= {"seconds", "nanos"}:
        raise ValueError(f"invalid duration {dict(value)!r}")
    seconds = int_from_json(value.get("seconds", 0))
    nanos = int_from_json(value.get("nanos", 0))
    if abs(seconds) > 315_576_000_000 or abs(nanos) > 999_999_999 or seconds * nanos < 0:
        raise ValueError(f"invalid duration {dict(value)!r}")
    delta = datetime.timedelta(seconds=abs(seconds), microseconds=abs(nanos) // 1000)
    return -delta if seconds < 0 or nanos < 0 else delta


def or_wrapped(parse: Callable[[Json], Any]) -> Callable[[Json], Any]:
    """A wrapper type's value, also in its message form ``{"value": 90}``, which
    Envoy's JSON parser takes as well as ``90`` (measured as for durations)."""

    def parsed(raw: Json) -> Any:
        if isinstance(raw, Mapping) and set(raw) == {"value"}:
            return parse(raw["value"])
        return parse(raw)

    return parsed


def timestamp_to_json(value: datetime.datetime) -> str:
    utc = value.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + fraction(utc.microsecond) + "Z"


def timestamp_from_json(value: Json) -> datetime.datetime:
    text = re.sub(r"(\.\d{6})\d+", r"\1", value) if isinstance(value, str) else ""
    parsed = datetime.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without timezone {value!r}")
    return parsed.astimezone(datetime.UTC)


def float_to_json(value: float) -> Json:
    """As protobuf prints doubles: integral values without ``.0``, non-finite ones as text."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return int(value) if value == int(value) and abs(value) < 2**53 else value


def float_from_json(value: Json) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def int_from_json(value: Json) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def bytes_to_json(value: bytes) -> str:
    return base64.b64encode(value).decode()


def bytes_from_json(value: Json) -> bytes:
    text = value.replace("-", "+").replace("_", "/") if isinstance(value, str) else "?"
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def expect(kind: type) -> Callable[[Json], Any]:
    def check(value: Json) -> Any:
        if not isinstance(value, kind):
            raise ValueError(f"expected a {kind.__name__}, got {value!r}")
        return value

    return check


SAME: Final[Callable[[Any], Any]] = lambda value: value  # noqa: E731


# The range of each integer proto type (betterproto2 names them as these strings).
INT_RANGES: Final[dict[str, tuple[int, int]]] = {
    **dict.fromkeys(
        ("int32", "sint32", "sfixed32"),
        (-(2**31), 2**31 - 1),
    ),
    **dict.fromkeys(("uint32", "fixed32"), (0, 2**32 - 1)),
    **dict.fromkeys(
        ("int64", "sint64", "sfixed64"),
        (-(2**63), 2**63 - 1),
    ),
    **dict.fromkeys(("uint64", "fixed64"), (0, 2**64 - 1)),
}


def utf8(value: str) -> bool:
    """What betterproto2's ``validate_string`` accepts: text that encodes as UTF-8."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON can carry one, UTF-8 cannot
        return False
    return True
