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


def workloads_in(res: Resources, namespace: str) -> list[m.Workload]:
    return [wl for key, wl in sorted(res.workloads.items()) if key[1] == namespace]


def selected(res: Resources, svc: m.Service) -> list[m.Workload]:
    """The workloads whose pods the Service selects, however many replicas they run."""
    return [
        wl
        for wl in workloads_in(res, svc.meta.namespace)
        if selects(svc.selector, dict(wl.pod_labels))
    ]


def given(sl: m.EndpointSlice) -> bool:
    """An EndpointSlice the input holds, not one derived from its workloads at load."""
    return MANAGED_BY not in sl.meta.labels


def slices_of(res: Resources, svc: m.Service) -> list[m.EndpointSlice]:
    ns, name = svc.meta.key
    return [
        sl
        for _key, sl in sorted(res.endpoint_slices.items())
        if sl.meta.namespace == ns and sl.service_name == name
    ]


def shows_pods(res: Resources, namespace: str) -> bool:
    """The input says which pods run in ``namespace``: it holds a workload or an
    EndpointSlice there. A manifest set of Services and routes alone does not, and a
    Service in it is not known to have no pods."""
    return bool(workloads_in(res, namespace)) or any(
        sl.meta.namespace == namespace and given(sl) for sl in res.endpoint_slices.values()
    )


def labels(selector: tuple[tuple[str, str], ...]) -> str:
    """A selector or label set as written on a command line: ``app=cart,tier=web``."""
    return ",".join(f"{k}={v}" for k, v in selector)
