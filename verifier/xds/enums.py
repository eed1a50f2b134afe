"""The Envoy enums the model and the rules compare against, as plain ``IntEnum``s.

A message holds envoy-data-plane's enum members and a record (``verifier.xds.records``)
holds the numbers; both compare equal to these (they are ints), and these need no
envoy-data-plane import. Same names and numbers as envoy-data-plane's classes
(``tests/test_records.py`` compares them member by member).
"""

from __future__ import annotations

from enum import IntEnum


def name_of(cls: type[IntEnum], value: int) -> str:
    """The member's name; "" for a number the enum does not define, as envoy-data-plane
    names one (its enums are open: a message may hold any number)."""
    try:
        return cls(int(value)).name
    except ValueError:
        return ""


class ClusterDiscoveryType(IntEnum):
    STATIC = 0
    STRICT_DNS = 1
    LOGICAL_DNS = 2
    EDS = 3
    ORIGINAL_DST = 4


class ClusterClusterProtocolSelection(IntEnum):
    USE_CONFIGURED_PROTOCOL = 0
    USE_DOWNSTREAM_PROTOCOL = 1


class VirtualHostTlsRequirementType(IntEnum):
    NONE = 0
    EXTERNAL_ONLY = 1
    ALL = 2


class RouteActionClusterNotFoundResponseCode(IntEnum):
    SERVICE_UNAVAILABLE = 0
    NOT_FOUND = 1
    INTERNAL_SERVER_ERROR = 2


class RedirectActionRedirectResponseCode(IntEnum):
    MOVED_PERMANENTLY = 0
    FOUND = 1
    SEE_OTHER = 2
    TEMPORARY_REDIRECT = 3
    PERMANENT_REDIRECT = 4


class HeaderValueOptionHeaderAppendAction(IntEnum):
    APPEND_IF_EXISTS_OR_ADD = 0
    ADD_IF_ABSENT = 1
    OVERWRITE_IF_EXISTS_OR_ADD = 2
    OVERWRITE_IF_EXISTS = 3


class HttpConnectionManagerPathWithEscapedSlashesAction(IntEnum):
    IMPLEMENTATION_SPECIFIC_DEFAULT = 0
    KEEP_UNCHANGED = 1
    REJECT_REQUEST = 2
    UNESCAPE_AND_REDIRECT = 3
    UNESCAPE_AND_FORWARD = 4


class CertificateValidationContextTrustChainVerification(IntEnum):
    VERIFY_TRUST_CHAIN = 0
    ACCEPT_UNTRUSTED = 1


class SubjectAltNameMatcherSanType(IntEnum):
    SAN_TYPE_UNSPECIFIED = 0
    EMAIL = 1
    DNS = 2
    URI = 3
    IP_ADDRESS = 4
    OTHER_NAME = 5


class FractionalPercentDenominatorType(IntEnum):
    HUNDRED = 0
    TEN_THOUSAND = 1
    MILLION = 2
