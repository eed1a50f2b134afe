"""Where each Gateway is reached (the address the aether edge gives it), and each Service.

Per-Gateway addressing is the edge's default (``edge.perGatewayAddressing=true``): every
Gateway gets an address of its own, as a LoadBalancer Service per Gateway would, and is
reached there alone. Shared addressing puts every Gateway of the class on one address.
This is deployment data, not a Gateway API decision: the translator binds listeners to
these addresses, and check sends each Gateway's requests there. Never imports the models
or the translator.

The address of a Gateway, in order:

0. the address the user fixed for it (``--gateway-address NS/NAME=IP``);
1. the first ``spec.addresses`` entry of type ``IPAddress`` ("Addresses requested for this
   Gateway"; an implementation that can honour it does);
2. otherwise one assigned from a CIDR (default ``192.0.2.0/24``, RFC 5737 TEST-NET-1: a
   documentation range that is never routed, so nothing is ever sent to it by mistake).
   The host number is 1 + SHA-256("namespace/name") mod (size - 2), moved up to the next
   free host on a collision, Gateways taken in (namespace, name) order: stable across runs
   and machines, and independent of the other Gateways unless two hash alike.

In shared mode every Gateway gets the CIDR's first host.

A Service written without ``spec.clusterIP`` gets one the same way, from the Service
CIDR (``assign_cluster_ips``), once at load: a cluster's API server assigns one to
every Service that is neither headless nor ExternalName, and real manifests leave it
out (docs/mesh.md, "What a mesh request is").
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.errors import InputError, InputErrors

if TYPE_CHECKING:
    from verifier.gatewayapi import model as m
    from verifier.gatewayapi.resources import Resources

PER_GATEWAY = "per-gateway"
SHARED = "shared"
MODES = (PER_GATEWAY, SHARED)
DEFAULT_CIDR = "192.0.2.0/24"

GatewayKey = tuple[str, str]


class AddressError(ValueError):
    """A CIDR or an address that cannot be used (the CLI reports it as bad input)."""


def parse_cidr(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError as exc:
        raise AddressError(f"{cidr!r} is not a CIDR ({exc})") from None
    if net.num_addresses < 4:
        raise AddressError(f"{cidr!r} holds fewer than 2 host addresses")
    return net


def requested_ip(addresses: Iterable[tuple[str, str]]) -> str | None:
    """The first ``IPAddress`` a Gateway's spec.addresses asks for, normalised."""
    for kind, value in addresses:
        if kind in ("IPAddress", ""):
            try:
                return str(ipaddress.ip_address(value))
            except ValueError:
                continue
    return None


def _hash_index(key: GatewayKey, hosts: int) -> int:
    digest = hashlib.sha256(f"{key[0]}/{key[1]}".encode()).digest()
    return 1 + int.from_bytes(digest[:8], "big") % hosts


@dataclass(frozen=True)
class Addressing:
    """How Gateways get addresses: the mode, the CIDR assigned from, and addresses the
    user fixed (``--gateway-address NS/NAME=IP``), which win over everything else."""

    mode: str = PER_GATEWAY
    cidr: str = DEFAULT_CIDR
    fixed: tuple[tuple[GatewayKey, str], ...] = ()
    # Gateway -> ((Gateway port, port the proxy listens on), ...), from --gateway-address
    ports: tuple[tuple[GatewayKey, tuple[tuple[int, int], ...]], ...] = ()

    def proxy_port(self, gateway: GatewayKey, port: int) -> int:
        """The port the proxy serves ``gateway``'s ``port`` on (the same by default)."""
        for key, pairs in self.ports:
            if key == gateway:
                return dict(pairs).get(port, port)
        return port

    @property
    def shared(self) -> bool:
        return self.mode == SHARED

    def assign(
        self, gateways: Iterable[tuple[GatewayKey, Iterable[tuple[str, str]]]]
    ) -> dict[GatewayKey, str]:
        """``assign`` with these settings; what cannot be assigned is bad input."""
        try:
            return assign(gateways, mode=self.mode, cidr=self.cidr, fixed=dict(self.fixed))
        except AddressError as exc:
            raise InputErrors(
                [InputError("--gateway-address", 0, "", "unassignable", str(exc))]
            ) from None


def ours(res: Resources, controller: str) -> dict[GatewayKey, object]:
    """The Gateways whose GatewayClass names ``controller``, by (namespace, name)."""
    classes = {n for n, gc in res.gateway_classes.items() if gc.controller_name == controller}
    return {k: gw for k, gw in res.gateways.items() if gw.class_name in classes}


def nothing_to_check(
    res: Resources,
    controller: str,
    where: str,
    *,
    mesh: bool = True,
    mesh_cases: bool = False,
    files: bool = True,
) -> InputError | None:
    """A run with nothing to judge would pass: that is bad input, and a mistyped
    controller name is named with the ones that were seen. A Gateway of the controller
    is something to judge, and so (``mesh``: the command judges sidecars too) is a mesh
    route (an HTTPRoute whose parent is a Service) or a mesh case (``mesh_cases``: a
    request to a Service with no route is kube-proxy's to answer, and that is checked).
    ``files``: the resources are files, and the hint names a scenario's base (a
    cluster, ``--kubeconfig``, has none)."""
    if ours(res, controller):
        return None
    if mesh and (
        mesh_cases or any(p.service_parent for r in res.httproutes.values() for p in r.parent_refs)
    ):
        return None
    seen = sorted({gc.controller_name for gc in res.gateway_classes.values()})
    hint = f"; GatewayClasses here name {', '.join(seen)}" if seen else ""
    mesh_too = ""
    if mesh:
        mesh_too = " and no mesh route (an HTTPRoute whose parentRef is a Service) nor mesh case"
    base = " (a scenario is loaded with its base: fixtures/base fixtures/<scenario>)"
    return InputError(
        where,
        0,
        "",
        "nothing-to-check",
        f"no Gateway of controller {controller} (--controller-name){hint}{mesh_too}: nothing "
        f"would be checked{base if files else ''}",
    )


def gateway_addresses(res: Resources, controller: str, how: Addressing) -> dict[GatewayKey, str]:
    """Each of our Gateways' address, as the translator binds it."""
    return how.assign((k, res.gateways[k].addresses) for k in ours(res, controller))


def parse_fixed(text: str) -> tuple[GatewayKey, str, tuple[tuple[int, int], ...]]:
    """``NAMESPACE/NAME=IP[:PORT>PROXYPORT[,PORT>PROXYPORT...]]`` -> (gateway, ip, ports):
    where a Gateway is reached, and which of its ports the proxy serves elsewhere."""
    gateway, eq, target = text.partition("=")
    ns, slash, name = gateway.partition("/")
    if not (eq and slash and ns and name):
        raise AddressError(f"{text!r}: expected NAMESPACE/NAME=IP[:PORT>PROXYPORT,...]")
    ip, ports = target, ""
    head, colon, tail = target.rpartition(":")
    if colon and ">" in tail:
        ip, ports = head, tail
    pairs = []
    for item in filter(None, ports.split(",")):
        gw_port, _, proxy = item.partition(">")
        # ASCII digits, few: str.isdigit() also takes '²', which int() refuses, and
        # int() refuses more than 4,300 digits; both raised ValueError out of here.
        numbers = [int(x) for x in (gw_port, proxy) if re.fullmatch(r"[0-9]{1,5}", x)]
        if len(numbers) != 2 or not all(0 < n < 65536 for n in numbers):
            raise AddressError(f"{text!r}: {item!r} is not PORT>PROXYPORT")
        pairs.append((numbers[0], numbers[1]))
    try:
        return (ns, name), str(ipaddress.ip_address(ip)), tuple(pairs)
    except ValueError:
        hint = ""
        if colon and tail.isdigit():
            hint = f" (a port goes in a map: {head}:{tail}>PROXYPORT)"
        raise AddressError(f"{text!r}: {ip!r} is not an IP address{hint}") from None


def assign(
    gateways: Iterable[tuple[GatewayKey, Iterable[tuple[str, str]]]],
    *,
    mode: str = PER_GATEWAY,
    cidr: str = DEFAULT_CIDR,
    fixed: Mapping[GatewayKey, str] | None = None,
) -> dict[GatewayKey, str]:
    """Gateway (namespace, name) -> its address; ``gateways`` pairs each key with its
    spec.addresses as (type, value); ``fixed`` addresses are taken as given."""
    if mode not in MODES:
        raise AddressError(f"addressing {mode!r}: expected one of {', '.join(MODES)}")
    net = parse_cidr(cidr)
    items = sorted((k, tuple(a)) for k, a in gateways)
    fixed = dict(fixed or {})
    if mode == SHARED:
        first = str(net.network_address + 1)
        return {k: fixed.get(k, first) for k, _ in items}
    out: dict[GatewayKey, str] = {}
    owner: dict[str, GatewayKey] = {}
    for key, addresses in items:
        ip = fixed.get(key) or requested_ip(addresses)
        if ip is None:
            continue
        if ip in owner:
            # Each Gateway alone on its address: two on one would conflict as in the
            # shared mode, which this mode exists to avoid. Say so instead of binding both.
            a, b = owner[ip], key
            raise AddressError(
                f"Gateways {a[0]}/{a[1]} and {b[0]}/{b[1]} are both given {ip}: "
                "per-Gateway addressing gives each Gateway an address of its own"
            )
        out[key] = ip
        owner[ip] = key
    taken: set[str] = set(out.values())
    for key, _ in items:
        if key in out:
            continue
        ip = _free_host(net, key, taken)
        if ip is None:
            raise AddressError(f"{cidr} has no free address left for Gateway {key[0]}/{key[1]}")
        out[key] = ip
        taken.add(ip)
    return out


def _free_host(
    net: ipaddress.IPv4Network | ipaddress.IPv6Network, key: GatewayKey, taken: set[str]
) -> str | None:
    """The host of ``net`` that ``key`` hashes to, else the next one not ``taken``
    (None: every host is): stable across runs and machines, and independent of the
    other keys unless two hash alike."""
    hosts = net.num_addresses - 2
    index = _hash_index(key, hosts)
    for step in range(hosts):
        ip = str(net.network_address + 1 + (index - 1 + step) % hosts)
        if ip not in taken:
            return ip
    return None


# ---------------------------------------------------------------- Services' ClusterIPs

# The Service CIDR a ClusterIP is assigned from when the manifest gives none: kubeadm's
# and kind's default (--service-cluster-ip-range), where the fixtures' Services are.
SERVICE_CIDR = "10.96.0.0/12"
# spec.clusterIP "None": a headless Service, which has no ClusterIP to call.
HEADLESS = "None"


def no_cluster_ip(svc: m.Service) -> str | None:
    """Why a mesh request cannot be sent to ``svc``'s ClusterIP, if it cannot: a headless
    or ExternalName Service has none (a Service written without one was given one at
    load, ``assign_cluster_ips``)."""
    ns, name = svc.meta.key
    if svc.type == "ExternalName":
        return (
            f"Service {ns}/{name} is of type ExternalName: it has no ClusterIP, and a mesh "
            "request goes to a Service's ClusterIP"
        )
    if not svc.cluster_ip or svc.cluster_ip == HEADLESS:
        return (
            f"Service {ns}/{name} is headless (clusterIP: None): it has no ClusterIP, and a "
            "mesh request goes to a Service's ClusterIP (give it a clusterIP, or leave "
            "spec.clusterIP out to have one assigned)"
        )
    return None


def assign_cluster_ips(services: Mapping[GatewayKey, m.Service]) -> dict[GatewayKey, str]:
    """A ClusterIP for every Service that needs one and whose manifest gives none, as a
    cluster's API server allocates it on create (real manifests leave it out). Taken
    from ``SERVICE_CIDR`` as Gateway addresses are from theirs: the host
    SHA-256("namespace/name") picks, moved up past any ClusterIP given or assigned
    before (Services in (namespace, name) order). An explicit ``clusterIP`` is kept; a
    headless Service (``None``) and an ExternalName one get none."""
    net = parse_cidr(SERVICE_CIDR)
    taken = {svc.cluster_ip for svc in services.values() if svc.cluster_ip}
    out: dict[GatewayKey, str] = {}
    for key, svc in sorted(services.items()):
        if svc.cluster_ip or svc.type == "ExternalName":
            continue
        ip = _free_host(net, key, taken)
        if ip is None:  # 2^20 Services: not an input anyone writes
            continue
        out[key] = ip
        taken.add(ip)
    return out


def cluster_ip_note(svc: m.Service, ip: str) -> str:
    ns, name = svc.meta.key
    return (
        f"{svc.meta.where()}: Service {ns}/{name} has no spec.clusterIP: assigned {ip} from "
        f"{SERVICE_CIDR}, as a cluster would (give spec.clusterIP to choose one)"
    )
