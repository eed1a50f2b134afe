"""The workloads the edge reads (Deployment, StatefulSet, DaemonSet), held to the fields
the Kubernetes API defines: their specs, the pod template, its PodSpec, Container and
ContainerPort (k8s.io/api ``apps/v1/types.go`` and ``core/v1/types.go``, release-1.37;
see ``schema_kube`` for why and how). What the endpoint derivation reads is checked:
the selector, the pod labels, the containers' ports, the service account.
"""

from __future__ import annotations

from typing import Any

from verifier.gatewayapi.schema_common import LABEL_SELECTOR
from verifier.gatewayapi.schema_core import Arr, Ctx, Int, Obj, Str, d, join, lst, opt, req
from verifier.gatewayapi.schema_kube import (
    IANA_SVC_NAME,
    LABELS,
    OBJECT_META,
    PROTOCOL,
    SPEC_AND_STATUS,
    known,
)


def _port_names_rule(ctx: Ctx, containers: Any, path: str) -> None:
    """Container port names are unique in a pod: a Service's named targetPort must
    resolve to one port (the API server rejects the pod template otherwise)."""
    seen: dict[str, str] = {}
    for i, container in enumerate(lst(containers)):
        for j, port in enumerate(lst(d(container).get("ports"))):
            name = d(port).get("name")
            here = f"{path}[{i}].ports[{j}].name"
            if isinstance(name, str) and name:
                if name in seen:
                    ctx.error(here, "unique", f"port name {name!r} is already used by {seen[name]}")
                seen.setdefault(name, here)


def _selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    if any(labels.get(k) != v for k, v in d(selector.get("matchLabels")).items()):
        return False
    for expr in (d(e) for e in lst(selector.get("matchExpressions"))):
        key, op, values = str(expr.get("key")), expr.get("operator"), lst(expr.get("values"))
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels.get(key) in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _workload_rule(ctx: Ctx, spec: Any, path: str) -> None:
    """apps/v1: "selector does not match template labels" is refused on create; the
    endpoints derived for a Service follow the pod template's labels, so a workload
    whose own selector would not own those pods is not read as if it did."""
    obj = d(spec)
    selector = obj.get("selector")
    labels = d(d(d(obj.get("template")).get("metadata")).get("labels"))
    if isinstance(selector, dict) and not _selector_matches(selector, labels):
        ctx.error(
            join(path, "selector"),
            "selector-mismatch",
            "selector does not match template labels (spec.template.metadata.labels)",
        )


CONTAINER_PORT = known(
    "ContainerPort",
    "name hostPort containerPort protocol hostIP",
    name=opt(
        Str(
            max_len=15,
            pattern=IANA_SVC_NAME,
            expect="must be an IANA service name (lowercase letters, digits, '-')",
            code="invalid-name",
        )
    ),
    containerPort=req(Int(minimum=1, maximum=65535)),
    protocol=opt(PROTOCOL),
)
CONTAINER = known(
    "Container",
    "name image command args workingDir ports envFrom env resources resizePolicy "
    "restartPolicy restartPolicyRules volumeMounts volumeDevices livenessProbe "
    "readinessProbe startupProbe lifecycle terminationMessagePath terminationMessagePolicy "
    "imagePullPolicy securityContext stdin stdinOnce tty",
    name=req(Str(min_len=1)),
    ports=opt(Arr(CONTAINER_PORT)),
)
POD_SPEC = known(
    "PodSpec",
    "volumes initContainers containers ephemeralContainers restartPolicy "
    "terminationGracePeriodSeconds activeDeadlineSeconds dnsPolicy nodeSelector "
    "serviceAccountName serviceAccount automountServiceAccountToken nodeName hostNetwork "
    "hostPID hostIPC shareProcessNamespace securityContext imagePullSecrets hostname "
    "subdomain affinity schedulerName tolerations hostAliases priorityClassName priority "
    "dnsConfig readinessGates runtimeClassName enableServiceLinks preemptionPolicy overhead "
    "topologySpreadConstraints setHostnameAsFQDN os hostUsers schedulingGates "
    "resourceClaims resources hostnameOverride schedulingGroup evictionResponders",
    containers=req(Arr(CONTAINER, min_items=1, rules=(_port_names_rule,))),
    serviceAccountName=opt(Str()),
    serviceAccount=opt(Str()),
)
POD_TEMPLATE = known(
    "PodTemplateSpec",
    "metadata spec",
    metadata=opt(known("ObjectMeta", OBJECT_META, labels=opt(LABELS))),
    spec=req(POD_SPEC),
)
# apps/v1 DeploymentSpec, StatefulSetSpec, DaemonSetSpec.
_WORKLOAD_SPECS = {
    "Deployment": (
        "DeploymentSpec",
        "replicas selector template strategy minReadySeconds revisionHistoryLimit paused "
        "progressDeadlineSeconds",
    ),
    "StatefulSet": (
        "StatefulSetSpec",
        "replicas selector template volumeClaimTemplates serviceName podManagementPolicy "
        "updateStrategy revisionHistoryLimit minReadySeconds "
        "persistentVolumeClaimRetentionPolicy ordinals",
    ),
    "DaemonSet": (
        "DaemonSetSpec",
        "selector template updateStrategy minReadySeconds revisionHistoryLimit",
    ),
}


def _workload(kind: str) -> Obj:
    """A workload: the fields the endpoint derivation reads are checked, every other
    field of its spec is known."""
    title, names = _WORKLOAD_SPECS[kind]
    fields = {"selector": req(LABEL_SELECTOR), "template": req(POD_TEMPLATE)}
    if "replicas" in names.split():
        fields["replicas"] = opt(Int(minimum=0))
    spec = known(title, names, rules=(_workload_rule,), **fields)
    return known(kind, SPEC_AND_STATUS, spec=req(spec))


WORKLOADS = {kind: _workload(kind) for kind in _WORKLOAD_SPECS}
