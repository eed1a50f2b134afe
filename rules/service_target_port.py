"""Every Service port's targetPort is a port the pods it selects declare.

Why it matters: the Service's targetPort is "the port to access on the pods targeted
by the service" (Kubernetes ServiceSpec.ports). A number no container listens on
(``targetPort: 8080`` for ``containerPort: 8000``) gives endpoints on that number,
so the edge dials them and, if the container listens only on its declared ports, the
connection is refused. containerPort is informational, so neither model nor the live
pass (whose echo backend listens wherever it is sent) can tell: both answer as if the
pods listen there, and the finding says so. A name "will be looked up as a named port
in the target Pod's container ports": a name no container declares (with the Service
port's protocol) leaves the pods without that port. This rule reports it at the
Service port's ``targetPort`` (EV914, a warning; at the port itself when targetPort
is left to default to it), names the workloads whose pods lack it, and offers their
containerPorts ("did you mean targetPort 8000?" when they declare one, or the
closest name).

containerPort is informational for a number: a pod template that declares no ports
at all may listen anywhere and is not judged for a numeric targetPort (a name still
needs a declared port to resolve). A workload the selector does not select is not
asked; a Service whose selector selects nothing is ``httproute-backend-endpoints``'s.

Example: Service ``shop/cart`` port 8080 with ``targetPort: 8080`` selecting
Deployment ``cart``, whose container declares ``containerPort: 8000``: EV914 at the
targetPort's line, "did you mean targetPort 8000?".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from verifier.rules.support.mistakes import at
from verifier.rules.support.pods import Pods, judged

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.suggest import closest

NAME = "service-target-port"
CODE = "EV914"


# What the finding says follows, for a number or a name: the models and the live pass
# answer as if the pods listen there, so the message must not say otherwise.
_EFFECT = {True: "target-port-number", False: "target-port-name"}


def _own(port: m.ServicePort, workloads: list[m.Workload]) -> list[m.ContainerPort]:
    """The workloads' container ports of the Service port's protocol."""
    return [c for wl in workloads for c in wl.container_ports if c.protocol == port.protocol]


def lacks(port: m.ServicePort, wl: m.Workload) -> bool:
    """The workload's pods do not declare what ``port`` targets (numbers: only when
    they declare some port; names: always, a name resolves only if declared)."""
    own = _own(port, [wl])
    if port.target_port.isdigit():
        return bool(wl.container_ports) and all(c.port != int(port.target_port) for c in own)
    return all(c.name != port.target_port for c in own)


def _fix(port: m.ServicePort, lacking: list[m.Workload]) -> tuple[str, str | None]:
    own = _own(port, lacking)
    if port.target_port.isdigit():
        numbers = sorted({str(c.port) for c in own}, key=int)
        if len(numbers) == 1:
            return hint("did-you-mean", name=f"targetPort {numbers[0]}"), numbers[0]
        return hint("container-ports", ports=", ".join(numbers) or "none"), None
    names = sorted({c.name for c in own if c.name})
    near = closest(port.target_port, names)
    if near is not None:
        return hint("did-you-mean", name=f"targetPort {near}"), near
    return hint("container-port-names", names=", ".join(names) or "none"), None


def _service(svc: m.Service, workloads: list[m.Workload]) -> Iterator[Finding]:
    ns, name = svc.meta.key
    for i, port in enumerate(svc.ports):
        lacking = [wl for wl in workloads if lacks(port, wl)]
        if not lacking:
            continue
        fix, near = _fix(port, lacking)
        declared = sorted({(c.port, c.name) for c in _own(port, lacking)})
        shown = [f"{number} ({named})" if named else str(number) for number, named in declared]
        who = ", ".join(f"{wl.meta.kind} {wl.meta.name}" for wl in lacking)
        yield at(
            CODE,
            NAME,
            svc.meta,
            f"spec.ports[{i}].targetPort",
            actual={"target_port": port.target_port, "workloads": who, "declared": shown},
            expected={"did_you_mean": near} if near else None,
            service=f"{ns}/{name}",
            port=port.port,
            target=port.target_port,
            workloads=who,
            declared=", ".join(shown) or "none",
            effect=hint(_EFFECT[port.target_port.isdigit()], target=port.target_port),
            fix=fix,
        )


def check(ctx: Context) -> Iterable[Finding]:
    pods = Pods(ctx.res)
    for _key, svc in sorted(ctx.res.services.items()):
        if judged(svc):
            yield from _service(svc, pods.selected(svc))


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://kubernetes.io/docs/reference/kubernetes-api/service-resources/service-v1/#ServiceSpec",
    doc=(__doc__ or "").strip(),
    check=check,
)
