"""What every translation of every valid world must satisfy, one function each.

A property takes the world and a Hypothesis ``data`` (for the requests it
draws) and returns a ``Failure`` or None. A failure carries the world and the
requests to write as a fixture: the world in which the Envoy model disagrees
with the spec model on those requests wherever there is one, so the fixture's
``cases.yaml`` (the spec model's answers) fails ``check`` with the broken
translator and passes with a correct one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from verifier.check import brief, outcome_diff
from verifier.semantics import witness as wt
from verifier.semantics.request import Backend, Outcome

from .names import DEFAULT_PROPERTIES as DEFAULT_PROPERTIES
from .names import LIVE_PROPERTIES
from .requests import neighbours
from .trial import Translator, TranslatorCrashed, Trial
from .worlds import GATEWAY_NS, World, renamed

if TYPE_CHECKING:
    from .mesh_plane import MeshAsked

# Requests per world: every witness, and drawn neighbours up to at least this many.
MIN_REQUESTS = 40
MIN_NEIGHBOURS = 16


@dataclass(frozen=True)
class Failure:
    property: str
    summary: str
    world: World
    requests: tuple[wt.Witness, ...] = ()


@dataclass(frozen=True)
class Mismatch:
    """A request on which real Envoy's answer is not one the Envoy model allows."""

    witness: wt.Witness  # as sent (the Host the client put on the wire)
    live: Outcome
    model: Outcome
    problems: tuple[str, ...]


class LivePlane(Protocol):
    """One real Envoy fed over ADS (``verifier.fuzz.plane``), as the properties use it."""

    def load(self, trial: Trial) -> str | None:
        """Push the trial's snapshot: Envoy's NACK message, or None once it serves it."""

    def ask(self, trial: Trial) -> list[Mismatch]:
        """Send every request of the (loaded) trial; where the Envoy model mispredicts."""

    def ask_mesh(self, trial: Trial) -> MeshAsked:
        """Send the trial's mesh requests through its pods' real sidecars."""


@dataclass
class Env:
    """What the properties share within a campaign."""

    translator: Translator
    validate: Callable[[Trial], str | None] | None = None  # Envoy's refusal, or None
    seen: dict[str, int] = field(default_factory=dict)  # coverage: witness features
    # Requests a live property could not send, by reason (reported, never passed over).
    not_sent: Counter[str] = field(default_factory=Counter)
    mesh_sent: int = 0  # mesh requests sent through real sidecars (envoy-agrees)
    plane: LivePlane | None = None  # set inside ``plane.in_plane`` for the live properties
    live: bool = False  # --envoy: envoy-accepts also pushes each translation over ADS
    # False (--no-mesh): worlds without mesh routes, for a translator of the edge only
    # (one that does not write a sidecar's xDS for ``--proxy NS/WORKLOAD``).
    mesh: bool = True


Property = Callable[[Env, World, Any], Failure | None]


def _translate(env: Env, world: World, name: str) -> Trial | Failure:
    try:
        return env.translator(world)
    except TranslatorCrashed as exc:
        return Failure(name, f"the translator failed on a valid world: {exc}", world)


def _requests(env: Env, trial: Trial, data: Any) -> Trial:
    """The trial with drawn neighbours added; its witnesses are all the requests."""
    base = trial.requests
    count = max(MIN_NEIGHBOURS, MIN_REQUESTS - len(base))
    drawn = data.draw(neighbours(base, count), label="requests")
    mesh = trial.mesh_requests  # only a world with mesh routes draws these
    mesh_drawn = data.draw(neighbours(mesh, MIN_NEIGHBOURS), label="mesh requests") if mesh else []
    out = trial.with_requests(drawn, mesh_drawn)
    for w in [*out.requests, *out.mesh_requests]:
        env.seen[w.feature] = env.seen.get(w.feature, 0) + 1
    return out


def _loaded(env: Env, world: World, name: str) -> Trial | Failure:
    """The translation, or the failure of a translator that crashed or wrote xDS
    Envoy refuses (no behaviour to compare then)."""
    trial = _translate(env, world, name)
    if isinstance(trial, Failure):
        return trial
    if trial.ctx.models_problem is not None:
        return Failure(name, f"Envoy refuses the xDS: {trial.ctx.models_problem}", world)
    problem = trial.sidecar_problem
    if problem is not None:
        return Failure(name, f"Envoy refuses the xDS of {problem}", world)
    return trial


def _asked(env: Env, world: World, data: Any, name: str) -> Trial | Failure | None:
    """The translation with its requests drawn; a crash is this property's failure,
    xDS Envoy refuses is ``envoy-accepts``' (None: nothing to judge here)."""
    trial = _translate(env, world, name)
    if isinstance(trial, Failure) or trial.ctx.models_problem is not None:
        return trial if isinstance(trial, Failure) else None
    return _requests(env, trial, data)


def models_agree(env: Env, world: World, data: Any) -> Failure | None:
    """The Envoy model on the translation agrees with the spec model on every request."""
    trial = _loaded(env, world, "models-agree")
    if isinstance(trial, Failure):
        return trial
    trial = _requests(env, trial, data)
    found = trial.comparisons()
    if not found:
        return None
    first = found[0]
    more = f" (and {len(found) - 1} more requests)" if len(found) > 1 else ""
    who = f" (the {first.answered_by})" if first.answered_by else ""
    return Failure(
        "models-agree", first.describe() + who + more, world, tuple(c.witness for c in found[:5])
    )


def envoy_accepts(env: Env, world: World, data: Any) -> Failure | None:
    """The translator does not crash, and Envoy loads what it writes."""
    trial = _loaded(env, world, "envoy-accepts")
    if isinstance(trial, Failure):
        return trial
    if env.validate is not None:
        refusal = env.validate(trial)
        if refusal is not None:
            return Failure("envoy-accepts", f"envoy --mode validate: {refusal}", world)
    if env.plane is not None:
        nack = env.plane.load(trial)
        if nack is not None:
            return Failure("envoy-accepts", f"Envoy NACKed it over ADS: {nack}", world)
    return None


def envoy_agrees(env: Env, world: World, data: Any) -> Failure | None:
    """Real Envoy, serving the translation, answers every request as the Envoy model
    says it will (``verifier.live.verdict.live_mismatches``: what a wire shows); a
    world's mesh requests, from their clients' pods through real sidecars
    (``verifier.fuzz.mesh_plane``), as the Envoy model on each client's sidecar xDS
    says."""
    if env.plane is None:
        raise RuntimeError("envoy-agrees runs only inside verifier.fuzz.plane.in_plane")
    trial = _asked(env, world, data, "envoy-agrees")
    if not isinstance(trial, Trial):
        return trial
    nack = env.plane.load(trial)
    if nack is not None:
        return Failure("envoy-agrees", f"Envoy NACKed xDS the model takes: {nack}", world)
    found = env.plane.ask(trial)
    if not found and trial.sidecars and trial.sidecar_problem is None:
        asked = env.plane.ask_mesh(trial)
        if asked.refused is not None:
            nacked = f"Envoy NACKed xDS the model takes: {asked.refused}"
            return Failure("envoy-agrees", nacked, world)
        env.not_sent.update(asked.not_sent)
        env.mesh_sent += asked.sent
        found = asked.found
    if not found:
        return None
    first = found[0]
    more = f" (and {len(found) - 1} more requests)" if len(found) > 1 else ""
    # A mesh request's line names its client; it went through that client's sidecar.
    sidecar = " through the client's sidecar" if first.witness.request.source else ""
    summary = (
        f"{first.witness.request.line()}{sidecar}: real Envoy answered {brief(first.live)}, "
        f"which the Envoy model does not predict ({'; '.join(first.problems)}){more}"
    )
    return Failure("envoy-agrees", summary, world, tuple(m.witness for m in found[:5]))


# ---------------------------------------------------------------- metamorphic


def reordered(world: World) -> World:
    """Documents in reverse order, and each rule's matches reversed: the spec ranks
    routes by creation time and name and rules by their index, never by where a
    document or a match is written."""
    docs = []
    for doc in reversed(world.docs):
        if doc["kind"] == "HTTPRoute":
            doc = {
                **doc,
                "spec": {
                    **doc["spec"],
                    "rules": [_reversed_matches(r) for r in doc["spec"]["rules"]],
                },
            }
        docs.append(doc)
    return World(tuple(docs))


def _reversed_matches(rule: dict[str, Any]) -> dict[str, Any]:
    if "matches" not in rule:
        return rule
    return {**rule, "matches": list(reversed(rule["matches"]))}


FRESH_HOST = "fresh.example"


def with_fresh_route(world: World) -> World:
    """Plus a route on a hostname no request of the world names."""
    gws = sorted({d["metadata"]["name"] for d in world.docs if d["kind"] == "Gateway"})
    fresh = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "fresh", "namespace": GATEWAY_NS},
        "spec": {
            "parentRefs": [{"name": gw, "namespace": GATEWAY_NS} for gw in gws],
            "hostnames": [FRESH_HOST],
            "rules": [{"backendRefs": [{"name": "svc-1", "port": 8080}]}],
        },
    }
    return World((*world.docs, fresh))


def _decision(o: Outcome, names: dict[str, str]) -> Outcome:
    """``o`` with the renamed Service names mapped back, for comparing decisions."""
    if not names:
        return o

    def back(b: Backend) -> Backend:
        return dataclasses.replace(
            b, namespace=names.get(b.namespace, b.namespace), name=names.get(b.name, b.name)
        )

    return dataclasses.replace(
        o, backends=tuple(back(b) for b in o.backends), mirrors=tuple(back(b) for b in o.mirrors)
    )


def metamorphic(env: Env, world: World, data: Any) -> Failure | None:
    """Reordering, consistent renaming and an unrelated route change no decision."""
    trial = _asked(env, world, data, "metamorphic")
    if not isinstance(trial, Trial):
        return trial
    new_world, names = renamed(world)
    inverse = {v: k for k, v in names.items()}
    variants = [
        ("documents and matches reordered", reordered(world), {}),
        ("names consistently prefixed", new_world, inverse),
        (f"a route on {FRESH_HOST} added", with_fresh_route(world), {}),
    ]
    for what, variant, back in variants:
        other = _translate(env, variant, "metamorphic")
        if isinstance(other, Failure):
            return other
        if other.ctx.models_problem is not None:
            return Failure(
                "metamorphic", f"{what}: Envoy refuses the xDS: {other.ctx.models_problem}", variant
            )
        for w in trial.requests:
            gateway = (
                (names.get(w.gateway[0], w.gateway[0]), names.get(w.gateway[1], w.gateway[1]))
                if back
                else w.gateway
            )
            request = other.resend(w, gateway)
            before = trial.envoy(w.request).outcome
            after = _decision(other.envoy(request).outcome, back)
            if not outcome_diff(before, after):
                continue
            summary = f"{what}: {w.request.line()} was {brief(before)}, now {brief(after)}"
            moved = dataclasses.replace(w, gateway=gateway, request=request)
            if trial.ctx.compare(w) is None and other.ctx.compare(moved) is not None:
                return Failure("metamorphic", summary, variant, (moved,))
            return Failure("metamorphic", summary, world, (w,))
    return None


# ---------------------------------------------------------------- status


def _accepted_on(trial: Trial) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """HTTPRoute "ns/name" -> the Gateways whose parentRef status says Accepted."""
    out: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for key, parents in trial.graph.route_status.items():
        for ps in parents:
            if any(c.type == "Accepted" and c.status == "True" for c in ps.conditions):
                out.setdefault(key, set()).add((ps.parent.namespace, ps.parent.name))
    return out


def status_consistent(env: Env, world: World, data: Any) -> Failure | None:
    """A route Accepted on a Gateway that the spec sends some request to is served
    there; a route not Accepted on a Gateway is never served there."""
    trial = _asked(env, world, data, "status-consistent")
    if not isinstance(trial, Trial):
        return trial
    accepted = _accepted_on(trial)
    served: dict[tuple[str, str], set[tuple[str, str]]] = {}
    reached: dict[tuple[str, str, str, str], wt.Witness] = {}
    attributed = False
    for w in trial.requests:
        e = trial.envoy(w.request).outcome
        if e.route is not None and e.route.httproute:
            attributed = True
            ns, _, name = e.route.httproute.partition("/")
            if w.gateway not in accepted.get((ns, name), set()):
                summary = (
                    f"HTTPRoute {ns}/{name} is not Accepted on Gateway {'/'.join(w.gateway)} "
                    f"but serves {w.request.line()}"
                )
                return Failure("status-consistent", summary, world, (w,))
            served.setdefault((ns, name), set()).add(w.gateway)
        s = trial.spec(w.gateway, w.request).outcome
        if s.route is not None and s.route.httproute:
            ns, _, name = s.route.httproute.partition("/")
            reached.setdefault((ns, name, *w.gateway), w)
    if not attributed:
        return None  # the xDS names no HTTPRoute (another translator's): nothing to hold it to
    for (ns, name, gns, gname), w in sorted(reached.items(), key=lambda kv: kv[0]):
        if (gns, gname) in accepted.get((ns, name), set()) and (gns, gname) not in served.get(
            (ns, name), set()
        ):
            summary = (
                f"HTTPRoute {ns}/{name} is Accepted on Gateway {gns}/{gname} and the spec "
                f"sends it {w.request.line()}, but no request reaches it there"
            )
            return Failure("status-consistent", summary, world, (w,))
    return None


PROPERTIES: dict[str, Property] = {
    "models-agree": models_agree,
    "metamorphic": metamorphic,
    "status-consistent": status_consistent,
    "envoy-accepts": envoy_accepts,
    "envoy-agrees": envoy_agrees,
}


def needs_plane(name: str, env: Env) -> bool:
    """Whether property ``name`` runs with the live plane in this campaign."""
    return name in LIVE_PROPERTIES or (name == "envoy-accepts" and env.live)
