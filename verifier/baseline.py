"""``check --baseline``: ask the models again only where the change can show.

A full check asks both models about every witness request and keeps the ones they
disagree on. Each answer is a function of the request and of a small part of the
inputs: the spec's of the Gateway it is sent to (and those sharing its address), of the
other Gateway-side resources, of the HTTPRoutes whose hostnames can match the
request's Host (no other Route can take part in choosing the rule that answers it)
and of the Services they name; Envoy's of the listeners that can take its
connection, of the one virtual host (and its route configuration's own fields) the
Host selects, of the clusters that virtual host reaches and of the Services their
endpoints resolve to. A
witness's *digest* covers the request and exactly those inputs, plus the tool's
own source. ``check --save-baseline FILE`` writes the digests of the witnesses the
models agreed on; a later ``check --baseline FILE`` skips every witness whose
digest is there, because asking again would give the same agreement. Everything
else (every other witness, every rule that does not compare answers) runs as in a
full check, so a baseline run reports exactly what a full run reports.

Over-approximation is safe (a witness is asked again), under-approximation is not,
so where a part is unusual (a Host that is not a plain DNS name, a Route hostname
that is not one, an object with no source text) the digest takes in more, never
less. The file holds digests only: no configuration, no secret.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import ipaddress
import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from verifier.errors import InputError, InputErrors
from verifier.semantics.directory import dns_service_keys
from verifier.semantics.envoy.clusters import target_hosts
from verifier.xds import read

if TYPE_CHECKING:
    import betterproto2

    from verifier.check import Context
    from verifier.gatewayapi.load import RawObject
    from verifier.semantics.witness import Witness

FORMAT: Final = "edge-verify baseline"
VERSION: Final = 1
DIGEST_BYTES: Final = 16

_DNS_NAME: Final = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")


def _h(*parts: bytes) -> bytes:
    h = blake2b(digest_size=DIGEST_BYTES)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


@cache
def tool_digest() -> str:
    """The digest of the checker's own source: a baseline written by other code (an
    older release, a local change to a rule or a model) says nothing about this one's
    answers, so it is not used."""
    import verifier
    import verifier.rules

    roots = [Path(verifier.__file__).parent, Path(verifier.rules.__file__).parent]
    h = blake2b(digest_size=DIGEST_BYTES)
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _raw_digest(raw: RawObject | None) -> bytes | None:
    """An object's data as written. Not its file or lines: no model reads them, so
    whether a request agrees does not depend on them, and a finding's location is
    worked out from the YAML of the run that reports it (a route that only moved,
    or a checkout elsewhere, is not asked again)."""
    if raw is None:
        return None
    return _h(json.dumps(raw.data, sort_keys=True, default=repr).encode())


def _message_digest(msg: betterproto2.Message) -> bytes:
    """A message's or a record's (verifier.xds.read.canonical); the two never meet in
    one baseline unless a resource is decoded another way, and then it is asked again."""
    return _h(read.type_name(msg).encode(), read.canonical(msg))


class Digests:
    """The digest of each witness of a check context (see the module's docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.usable = True  # False: some input has no source text; nothing is reused
        self._named: dict[int, frozenset[str] | None] = {}  # id(vhost) -> its clusters
        self._cluster: dict[str, bytes] = {}
        self._hosts: dict[str, set[str]] = {}  # cluster -> the endpoint hosts it may read
        unnamed = self._clusters()
        self.common = self._common(unnamed)
        self._gateways()
        self._listeners()
        self._services()
        self._routes: dict[tuple[str, str], bytes] = {}
        self._exact: dict[str, list[tuple[str, str]]] = {}
        self._wildcard: dict[str, list[tuple[str, str]]] = {}  # ".example.com" -> keys
        self._any: list[tuple[str, str]] = []
        for key, route in sorted(ctx.res.httproutes.items()):
            self._routes[key] = self._as_written(route.meta.raw)
            names = [h.lower() for h in route.hostnames]
            if not names or any(not _indexable(n) for n in names):
                self._any.append(key)
                continue
            for n in names:
                if n.startswith("*."):
                    self._wildcard.setdefault(n[1:], []).append(key)
                else:
                    self._exact.setdefault(n, []).append(key)
        self._by_host: dict[str, bytes] = {}
        self._by_connection: dict[tuple[str, int, str, str, str], bytes] = {}
        self._configs: dict[int, bytes] = {}
        self._vhosts: dict[int, bytes] = {}

    def _as_written(self, raw: RawObject | None) -> bytes:
        """``_raw_digest``; an object with no source text makes the digests unusable
        (nothing is skipped), since what it holds cannot be compared."""
        found = _raw_digest(raw)
        if found is None:
            self.usable = False
            return b""
        return found

    def _clusters(self) -> list[bytes]:
        """Each cluster's digest, with the assignments the resolver would read for it
        (its own name's, its EDS service name's). The clusters no virtual host names
        (and the assignments none of those reads) are returned, for the common part:
        no request reaches them, and were one to, every request would be asked again."""
        snap, envoy = self.ctx.snapshot, self.ctx.envoy
        assignments = {e.cluster_name: e for e in snap.endpoints}
        keys: dict[str, set[str]] = {}
        for c in snap.clusters:
            self._hosts[c.name] = target_hosts(c, assignments)
            eds = c.eds_cluster_config
            keys[c.name] = {c.name, (eds.service_name if eds else "") or c.name}
            self._cluster[c.name] = _h(
                _message_digest(c),
                *(
                    _message_digest(assignments[k]) if k in assignments else b"-"
                    for k in sorted(keys[c.name])
                ),
            )
        named: set[str] = set()
        for rc in snap.routes:
            for vh in rc.virtual_hosts:
                found = self._named[id(vh)] = envoy.clusters_of(rc, vh)
                named |= found or set()
        read = {k for n in named if n in keys for k in keys[n]}
        return [
            *(n.encode() + self._cluster[n] for n in sorted(self._cluster) if n not in named),
            *(_message_digest(assignments[k]) for k in sorted(assignments) if k not in read),
        ]

    def _services(self) -> None:
        """Indexes for the Services a request may read: the Services each HTTPRoute's
        backendRefs name (wherever they are: rules, filters, mirrors), and the
        Services an endpoint address belongs to (ClusterIP or EndpointSlice)."""
        res = self.ctx.res
        self._backends: dict[tuple[str, str], set[tuple[str, str]]] = {
            key: _backend_refs(route.meta.raw.data if route.meta.raw else {}, key[0])
            for key, route in res.httproutes.items()
        }
        self._slices: dict[tuple[str, str], list[bytes]] = {}
        self._by_address: dict[str, set[tuple[str, str]]] = {}
        directory = self.ctx.envoy.resolver.directory
        for sl in res.endpoint_slices.values():
            key = (sl.meta.namespace, sl.service_name)
            # By content: a slice derived from workloads carries its Service's source;
            # the identity each pod presents (its workload's ServiceAccount) too.
            identities = repr([directory.identity(a) for a in sl.addresses]).encode()
            self._slices.setdefault(key, []).append(_h(repr(sl).encode(), identities))
            for address in sl.addresses:
                self._by_address.setdefault(address, set()).add(key)
        for svc in res.services.values():
            if svc.cluster_ip:
                self._by_address.setdefault(svc.cluster_ip, set()).add(svc.meta.key)
        self._service: dict[tuple[str, str], bytes] = {}
        self._reach: dict[str, bytes] = {}

    def _service_digest(self, keys: Iterable[tuple[str, str]]) -> bytes:
        """The Services ``keys`` (absent ones too) with their EndpointSlices."""
        parts = []
        for key in sorted(set(keys)):
            found = self._service.get(key)
            if found is None:
                svc = self.ctx.res.services.get(key)
                own = b"missing" if svc is None else self._as_written(svc.meta.raw)
                slices = sorted(self._slices.get(key, ()))
                found = self._service[key] = _h(repr(key).encode(), own, *slices)
            parts.append(found)
        return _h(*parts)

    def _cluster_reach(self, name: str) -> bytes:
        """A cluster's digest with the Services its endpoints may resolve to: by DNS
        name (``<svc>.<ns>[.svc[.cluster.local]]``, present or not) and by address."""
        found = self._reach.get(name)
        if found is None:
            keys: set[tuple[str, str]] = set()
            for host in self._hosts.get(name, ()):
                keys |= {*dns_service_keys(host), *self._by_address.get(host, ())}
            own = self._cluster.get(name, b"missing")
            found = self._reach[name] = _h(name.encode(), own, self._service_digest(keys))
        return found

    def _reached(self, rc: Any, vhost: Any) -> bytes:
        """The clusters requests routed by ``vhost`` may reach, as their digests; all
        of them when a request header may name one."""
        if id(vhost) not in self._named:  # an inline route configuration's
            self._named[id(vhost)] = self.ctx.envoy.clusters_of(rc, vhost)
        names = self._named[id(vhost)]
        every = sorted(self._cluster if names is None else names)
        return _h(*(self._cluster_reach(n) for n in every))

    def _common(self, unnamed: list[bytes]) -> bytes:
        """What every answer may read: the tool, the options, every resource but the
        HTTPRoutes, the Gateways, the ListenerSets and the backends, and every xDS
        resource but the listeners, the route configurations and the clusters some
        virtual host names."""
        ctx = self.ctx
        parts = [
            tool_digest().encode(),
            repr((ctx.profile, ctx.controller_name, ctx.addressing, ctx.trust_domain)).encode(),
            repr(sorted(ctx.mesh_registry)).encode(),
        ]
        res = ctx.res
        tables: list[dict[Any, Any]] = [
            res.gateway_classes,
            res.reference_grants,
            res.namespaces,
            res.secrets,
            res.config_maps,
            res.other_routes,
        ]
        for table in tables:
            parts.append(str(len(table)).encode())
            for key in sorted(table, key=repr):
                parts += [repr(key).encode(), self._as_written(table[key].meta.raw)]
        secrets = ctx.snapshot.secrets
        parts += [str(len(secrets)).encode(), *(_message_digest(m) for m in secrets)]
        parts += [str(len(unnamed)).encode(), *unnamed]
        return _h(*parts)

    def _gateways(self) -> None:
        """Each Gateway as written with the ListenerSets whose parentRef names it, and
        which Gateways share an address: a request sent to one may read the others
        there (shared addressing: conflicts, a port one does not serve answered by
        another). A ListenerSet naming no Gateway here is read by no request."""
        ctx = self.ctx
        sets: dict[tuple[str, str], list[bytes]] = {}  # parent -> its ListenerSets'
        for key, ls in sorted(ctx.res.listener_sets.items()):
            sets.setdefault((ls.parent_namespace, ls.parent_name), []).append(
                repr(key).encode() + self._as_written(ls.meta.raw)
            )
        self._gateway: dict[tuple[str, str], bytes] = {}
        for key, gw in ctx.res.gateways.items():
            self._gateway[key] = _h(self._as_written(gw.meta.raw), *sets.get(key, ()))
        self._at: dict[str, list[tuple[str, str]]] = {}
        for key, address in ctx.addresses.items():
            self._at.setdefault(address, []).append(key)
        self._by_gateway: dict[tuple[str, str], bytes] = {}

    def _gateway_side(self, gateway: tuple[str, str]) -> bytes:
        """The Gateways a request to ``gateway`` may read: those on its address (every
        Gateway when it has none, or is not there)."""
        found = self._by_gateway.get(gateway)
        if found is None:
            address = self.ctx.addresses.get(gateway)
            keys = self._at.get(address, []) if address is not None else []
            if gateway not in keys:
                keys = list(self._gateway)
            found = self._by_gateway[gateway] = _h(
                *(p for k in sorted(keys) for p in (repr(k).encode(), self._gateway[k]))
            )
        return found

    def _listeners(self) -> None:
        """The listeners by what they bind: a connection to an address and port is taken
        by a listener bound to both, else by one on a wildcard address and that port. One
        that binds no plain address and port, or may hand connections on
        (``use_original_dst``), is read by every connection."""
        self._bound: dict[tuple[str, int], list[bytes]] = {}  # (address, port)
        self._wildcard_on: dict[int, list[bytes]] = {}  # port: any address
        self._anywhere: list[bytes] = []
        for li in self.ctx.snapshot.listeners:
            digest = _message_digest(li)
            addresses = [li.address, *(x.address for x in li.additional_addresses)]
            binds: set[tuple[str, int]] = set()
            plain = li.use_original_dst is None
            for a in addresses:
                sa = a.socket_address if a is not None else None
                if sa is not None and sa.port_value:
                    binds.add((sa.address or "", sa.port_value))
                else:
                    plain = False  # a pipe, an internal listener, no port
            if not plain:
                self._anywhere.append(digest)
            for address, port in binds:
                ip = _ip(address)
                if ip is None:  # a wildcard, or a name: on every address
                    self._wildcard_on.setdefault(port, []).append(digest)
                else:
                    self._bound.setdefault((ip, port), []).append(digest)
        self._by_destination: dict[tuple[str, int], bytes] = {}

    def _listener_side(self, address: str, port: int) -> bytes:
        """The listeners a connection to ``address``:``port`` may be taken by (all those
        on the port when the address is not a plain IP)."""
        key = (address, port)
        found = self._by_destination.get(key)
        if found is None:
            ip = _ip(address)
            if ip is None:
                bound = [d for (_, p), ds in sorted(self._bound.items()) if p == port for d in ds]
            else:
                bound = self._bound.get((ip, port), [])
            found = self._by_destination[key] = _h(
                repr(key).encode(),
                *bound,
                b"wildcard",
                *self._wildcard_on.get(port, []),
                b"anywhere",
                *self._anywhere,
            )
        return found

    def _spec_side(self, hostname: str) -> bytes:
        """The HTTPRoutes a request for ``hostname`` can be answered by, as written."""
        found = self._by_host.get(hostname)
        if found is not None:
            return found
        if not _indexable(hostname) or hostname.startswith("*"):
            keys = list(self._routes)
        else:
            keys = list(self._exact.get(hostname, ()))
            dot = hostname.find(".")
            while dot != -1:
                keys += self._wildcard.get(hostname[dot:], ())
                dot = hostname.find(".", dot + 1)
            keys += self._any
        chosen = sorted(set(keys))
        parts = [p for k in chosen for p in (repr(k).encode(), self._routes[k])]
        backends = self._service_digest(b for k in chosen for b in self._backends[k])
        found = self._by_host[hostname] = _h(*parts, backends)
        return found

    def _envoy_side(self, w: Witness) -> bytes:
        """The route configuration's own fields and the virtual host the request is
        routed by, as the Envoy model selects them."""
        r = w.request
        key = (r.address, r.listener_port, r.scheme.lower(), r.sni or "", r.host)
        found = self._by_connection.get(key)
        if found is not None:
            return found
        rc, vhost = self.ctx.envoy.virtual_host_of(r)
        parts = [b"-" if rc is None else self._config(rc)]
        if rc is not None and vhost is not None:
            parts.append(self._reached(rc, vhost))
            vd = self._vhosts.get(id(vhost))
            if vd is None:
                read = self.ctx.snapshot.digest_as_read(vhost)
                vd = _message_digest(vhost) if read is None else _h(b"as read", read)
                self._vhosts[id(vhost)] = vd
            parts.append(vd)
        found = self._by_connection[key] = _h(*parts)
        return found

    def _config(self, rc: Any) -> bytes:
        found = self._configs.get(id(rc))
        if found is None:
            own = copy.copy(rc)
            own.virtual_hosts = []
            found = self._configs[id(rc)] = _message_digest(own)
        return found

    def of(self, w: Witness) -> bytes:
        return _h(
            self.common,
            repr(w).encode(),
            self._gateway_side(w.gateway),
            self._spec_side(w.request.hostname.lower()),
            self._listener_side(w.request.address, w.request.listener_port),
            self._envoy_side(w),
        )


def _backend_refs(data: Any, namespace: str) -> set[tuple[str, str]]:
    """Every (namespace, name) a ``backendRef`` or ``backendRefs`` entry anywhere in an
    HTTPRoute's data names (the Route's namespace where none is given)."""
    found: set[tuple[str, str]] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, is_ref = stack.pop()
        if isinstance(node, dict):
            if is_ref:
                found.add((str(node.get("namespace") or namespace), str(node.get("name"))))
            for key, value in node.items():
                if key == "backendRef":
                    stack.append((value, True))
                elif key == "backendRefs" and isinstance(value, list):
                    stack += [(item, True) for item in value]
                else:
                    stack.append((value, False))
        elif isinstance(node, list):
            stack += [(item, False) for item in node]
    return found


def _ip(address: str) -> str | None:
    """A specific IP address in one spelling (an IPv4-mapped IPv6 address as its IPv4
    address), None for a wildcard or anything else."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return None if ip.is_unspecified else str(ip)


def _indexable(hostname: str) -> bool:
    """A plain lower-case DNS name, or one wildcard label in front of one."""
    name = hostname[2:] if hostname.startswith("*.") else hostname
    return _DNS_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Baseline:
    """The digests of the witnesses the models agreed on in an earlier check."""

    agreed: frozenset[bytes]


def load(path: str) -> tuple[Baseline | None, list[str]]:
    """The baseline in ``path`` (``-``: standard input), or None (with why) when it was
    written by other code or in another format version: the run is then a full
    check, which is still exactly right. A file that is not a baseline is bad input,
    read under the same limits as every other input (size, nesting)."""
    from verifier.inputs import STDIN, load_json, read_stdin, read_text

    name = STDIN if path == "-" else path
    try:
        doc = load_json(read_stdin() if path == "-" else read_text(path), name)
    except InputErrors as exc:  # said of --baseline, as an --xds file's are of --xds
        raise InputErrors(
            [dataclasses.replace(e, field=e.field or "--baseline") for e in exc.errors]
        ) from None

    def bad(field: str, expected: str) -> InputErrors:
        return InputErrors([InputError(name, 0, field, "invalid", f"expected {expected}")])

    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad("format", f"{FORMAT!r}: a baseline is a file check --save-baseline writes")
    if doc.get("version") != VERSION or doc.get("tool") != tool_digest():
        why = (
            f"baseline {path} was written by another build of edge-verify: "
            "it is not used, and every request is asked (a full check)"
        )
        return None, [why]
    agreed = doc.get("agreed")
    hexdigits = f"a list of {2 * DIGEST_BYTES}-digit hexadecimal digests"
    if not isinstance(agreed, list) or not all(
        isinstance(d, str) and len(d) == 2 * DIGEST_BYTES for d in agreed
    ):
        raise bad("agreed", hexdigits)
    try:
        digests = frozenset(bytes.fromhex(d) for d in agreed)
    except ValueError:
        raise bad("agreed", hexdigits) from None
    return Baseline(digests), []


def check_writable(path: str) -> None:
    """Refuse a --save-baseline target that cannot be written, before the check runs
    rather than after it."""
    target = Path(path)
    problem = None
    if target.is_dir():
        problem = os.strerror(errno.EISDIR)
    elif not target.parent.is_dir():
        problem = os.strerror(errno.ENOENT)
    if problem is not None:
        raise InputErrors([InputError(path, 0, "--save-baseline", "unwritable", problem)])


def save(path: str, agreed: Iterable[bytes]) -> None:
    """Write the digests atomically: a run that stops half-way leaves the old file."""
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "tool": tool_digest(),
        "agreed": sorted(d.hex() for d in agreed),
    }
    target = Path(path)
    check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise InputErrors(
            [InputError(path, 0, "--save-baseline", "unwritable", exc.strerror or str(exc))]
        ) from None
    try:
        os.fchmod(fd, 0o644)  # as any report it writes; mkstemp's is 0600
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out, separators=(",", ":"))
            out.write("\n")
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputErrors(
            [InputError(path, 0, "--save-baseline", "unwritable", exc.strerror or str(exc))]
        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
