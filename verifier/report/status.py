"""Gateway and HTTPRoute status, rendered as a controller would publish it.

``--format yaml`` must be comparable with what a real controller writes to the API
server, so the stanzas follow the Gateway API v1.5 status types field by field.
Timestamps are pinned (nothing here may depend on the clock) so the output can
be diffed and kept as a golden. The text form is for a person scanning a
terminal: one line per condition, each naming its object, so grep and diff
work on it line by line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from verifier.gatewayapi import model as m
from verifier.gatewayapi.attach import (
    HTTP_KINDS,
    Condition,
    GatewayStatus,
    Graph,
    ListenerSetStatus,
)
from verifier.gatewayapi.resources import Resources

if TYPE_CHECKING:  # rich styles a terminal only; piped status never loads it
    from rich.console import Console

API_VERSION = f"{m.GATEWAY_GROUP}/v1"
# A real controller writes the time a condition last changed; a fixed value keeps
# the output a pure function of the input.
LAST_TRANSITION_TIME = "1970-01-01T00:00:00Z"
HTTP_PROTOCOLS = frozenset({"HTTP", "HTTPS"})


@dataclass(frozen=True)
class StatusLine:
    """One condition of one object (or listener, or route parent), for the text form."""

    subject: str
    type: str
    status: str
    reason: str
    message: str = ""

    def __str__(self) -> str:
        tail = f": {self.message}" if self.message else ""
        return f"{self.subject}: {self.type}={self.status} ({self.reason}){tail}"


def _generation(meta: m.Meta) -> int:
    """metadata.generation, which a controller echoes as observedGeneration.

    Files written by hand rarely carry it; the API server starts it at 1.
    """
    raw = meta.raw
    md = raw.data.get("metadata") if raw is not None else None
    gen = md.get("generation") if isinstance(md, dict) else None
    return gen if isinstance(gen, int) and not isinstance(gen, bool) and gen > 0 else 1


def _condition(cond: Condition, generation: int) -> dict[str, Any]:
    # Key order as in metav1.Condition, so the YAML reads like kubectl's.
    return {
        "type": cond.type,
        "status": cond.status,
        "observedGeneration": generation,
        "lastTransitionTime": LAST_TRANSITION_TIME,
        "reason": cond.reason,
        "message": cond.message,
    }


def _supported_kinds(lst: m.GatewayListener) -> list[dict[str, str]]:
    """The route kinds a listener accepts: what it asked for, less what the edge cannot serve."""
    if lst.protocol not in HTTP_PROTOCOLS:
        return []
    kinds = lst.allowed_kinds or HTTP_KINDS
    return [{"group": k.group, "kind": k.kind} for k in kinds if k in HTTP_KINDS]


def _parent_ref(ref: m.ParentRef) -> dict[str, Any]:
    out: dict[str, Any] = {
        "group": ref.group,
        "kind": ref.kind,
        "namespace": ref.namespace,
        "name": ref.name,
    }
    if ref.section_name is not None:
        out["sectionName"] = ref.section_name
    if ref.port is not None:
        out["port"] = ref.port
    return out


def _object(kind: str, meta: m.Meta, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"namespace": meta.namespace, "name": meta.name},
        "status": status,
    }


def status_documents(
    res: Resources, graph: Graph, addresses: Mapping[tuple[str, str], str] | None = None
) -> list[dict[str, Any]]:
    """The status stanza of every Gateway and HTTPRoute this controller owns, sorted.

    ``addresses``: where each Gateway is reached (``verifier.gatewayapi.addresses``),
    written as ``status.addresses``: "Addresses lists the network addresses that have
    been bound to the Gateway", what the conformance suite waits for."""
    docs: list[dict[str, Any]] = []
    for key in sorted(graph.gateway_status):
        gw = res.gateways[key]
        gs = graph.gateway_status[key]
        gen = _generation(gw.meta)
        listeners = [
            {
                "name": ls.name,
                "supportedKinds": _supported_kinds(lst),
                "attachedRoutes": ls.attached_routes,
                "conditions": [_condition(c, gen) for c in ls.conditions],
            }
            for lst, ls in zip(gw.listeners, gs.listeners, strict=True)
        ]
        status: dict[str, Any] = {}
        if addresses and key in addresses:
            status["addresses"] = [{"type": "IPAddress", "value": addresses[key]}]
        status["conditions"] = [_condition(c, gen) for c in gs.conditions]
        status["listeners"] = listeners
        if gw.allowed_listeners != "None" or gs.attached_listener_sets:
            status["attachedListenerSets"] = gs.attached_listener_sets
        docs.append(_object("Gateway", gw.meta, status))
    for key in sorted(graph.listener_set_status):
        lset = res.listener_sets[key]
        lss = graph.listener_set_status[key]
        gen = _generation(lset.meta)
        entries = {lst.name: lst for lst in lset.listeners}
        listeners = [
            {
                "name": ls.name,
                "supportedKinds": _supported_kinds(entries[ls.name]),
                "attachedRoutes": ls.attached_routes,
                "conditions": [_condition(c, gen) for c in ls.conditions],
            }
            for ls in lss.listeners
        ]
        ls_status = {"conditions": [_condition(c, gen) for c in lss.conditions]}
        if listeners:
            ls_status["listeners"] = listeners
        docs.append(_object("ListenerSet", lset.meta, ls_status))
    for key in sorted(graph.route_status):
        route = res.httproutes[key]
        gen = _generation(route.meta)
        parents = [
            {
                "parentRef": _parent_ref(ps.parent),
                "controllerName": ps.controller_name or graph.controller_name,
                "conditions": [_condition(c, gen) for c in ps.conditions],
            }
            for ps in graph.route_status[key]
        ]
        docs.append(_object("HTTPRoute", route.meta, {"parents": parents}))
    return docs


def format_yaml(docs: Iterable[dict[str, Any]]) -> str:
    """A multi-document stream, each object after a ``---``, as kubectl tools read it."""
    return yaml.safe_dump_all(
        list(docs), sort_keys=False, explicit_start=True, default_flow_style=False, width=1000
    )


def _parent_subject(route: str, ref: m.ParentRef) -> str:
    where = f"{ref.kind} {ref.namespace}/{ref.name}"
    if ref.section_name is not None:
        where += f" listener {ref.section_name}"
    if ref.port is not None:
        where += f" port {ref.port}"
    return f"HTTPRoute {route} -> {where}"


def _lines(subject: str, conditions: Iterable[Condition]) -> list[StatusLine]:
    return [StatusLine(subject, c.type, c.status, c.reason, c.message) for c in conditions]


def status_lines(res: Resources, graph: Graph) -> list[StatusLine]:
    """Every condition as one line, Gateways first, in the same order as the YAML."""
    out: list[StatusLine] = []
    owners: list[tuple[str, GatewayStatus | ListenerSetStatus]] = [
        (f"Gateway {ns}/{name}", graph.gateway_status[(ns, name)])
        for ns, name in sorted(graph.gateway_status)
    ]
    owners += [
        (f"ListenerSet {ns}/{name}", graph.listener_set_status[(ns, name)])
        for ns, name in sorted(graph.listener_set_status)
    ]
    for subject, owner in owners:
        out += _lines(subject, owner.conditions)
        for ls in owner.listeners:
            n = ls.attached_routes
            routes = f"{n} route{'' if n == 1 else 's'}"
            out += _lines(f"{subject} listener {ls.name} ({routes})", ls.conditions)
    for ns, name in sorted(graph.route_status):
        for ps in graph.route_status[(ns, name)]:
            out += _lines(_parent_subject(f"{ns}/{name}", ps.parent), ps.conditions)
    return out


def format_text(lines: Iterable[StatusLine]) -> str:
    """Plain lines for pipes and files: no escape codes, stable for grep and diff."""
    return "".join(f"{line}\n" for line in lines)


def _is_problem(line: StatusLine) -> bool:
    # Conflicted is the one condition where True is the bad state.
    return (line.status == "True") == (line.type == "Conflicted")


def print_rich(lines: Iterable[StatusLine], console: Console) -> None:
    """The same lines as ``format_text``, with problems in red so they stand out."""
    from rich.text import Text

    for line in lines:
        text = Text()
        text.append(line.subject, style="bold")
        text.append(": ")
        text.append(f"{line.type}={line.status}", style="red" if _is_problem(line) else "green")
        text.append(f" ({line.reason})", style="dim" if not _is_problem(line) else "")
        if line.message:
            text.append(f": {line.message}")
        console.print(text, soft_wrap=True)
