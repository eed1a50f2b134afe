"""Which pods of the input a Service sends to: what the Service rules share.

A Service reaches the pods its selector selects, on their targetPort. The input holds
those pods as workloads (Deployments, StatefulSets, DaemonSets: their pod templates)
and, from a cluster or written by hand, EndpointSlices. Selection is the
EndpointSlice controller's, as ``verifier.gatewayapi.workloads`` derives it (the input
layer: no model and no translator is asked).
"""

from __future__ import annotations

from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.gatewayapi.workloads import MANAGED_BY, selects


def judged(svc: m.Service) -> bool:
    """A Service whose pods its selector picks: the others (no selector, ExternalName)
    have the endpoints someone gives them, or none."""
    return bool(svc.selector) and svc.type != "ExternalName"


def given(sl: m.EndpointSlice) -> bool:
    """An EndpointSlice the input holds, not one derived from its workloads at load."""
    return MANAGED_BY not in sl.meta.labels


def labels(selector: tuple[tuple[str, str], ...]) -> str:
    """A selector or label set as written on a command line: ``app=cart,tier=web``."""
    return ",".join(f"{k}={v}" for k, v in selector)


class Pods:
    """The input's workloads and EndpointSlices by namespace and Service, filed once
    per check: a rule asks about every backendRef, and a large input has thousands."""

    def __init__(self, res: Resources) -> None:
        self.workloads: dict[str, list[m.Workload]] = {}
        for (_kind, ns, _name), wl in sorted(res.workloads.items()):
            self.workloads.setdefault(ns, []).append(wl)
        self.slices: dict[tuple[str, str], list[m.EndpointSlice]] = {}
        self.given_in: set[str] = set()
        for _key, sl in sorted(res.endpoint_slices.items()):
            self.slices.setdefault((sl.meta.namespace, sl.service_name), []).append(sl)
            if given(sl):
                self.given_in.add(sl.meta.namespace)

    def workloads_in(self, namespace: str) -> list[m.Workload]:
        return self.workloads.get(namespace, [])

    def selected(self, svc: m.Service) -> list[m.Workload]:
        """The workloads whose pods the Service selects, however many replicas they run."""
        return [
            wl
            for wl in self.workloads_in(svc.meta.namespace)
            if selects(svc.selector, dict(wl.pod_labels))
        ]

    def ready(self, svc: m.Service) -> bool:
        """An EndpointSlice of the Service, given or derived, lists a ready address."""
        return any(sl.addresses for sl in self.slices.get(svc.meta.key, []))

    def shown(self, namespace: str) -> bool:
        """The input says which pods run in ``namespace``: it holds a workload or an
        EndpointSlice there. A manifest set of Services and routes alone does not, and
        a Service in it is not known to have no pods."""
        return bool(self.workloads_in(namespace)) or namespace in self.given_in
