"""Three answers to one request (spec model, Envoy model, real Envoy), and which is odd.

The static check compares the two models; the live pass adds the third answer,
so a disagreement can be pinned on one side instead of reported as "the models
differ". The live answer is compared with each model's prediction on what a
wire can show (status, the backend that answered, the request it saw, redirect
parts, the response headers the configuration sets); the models are compared
with each other as ``check`` compares them (``verifier.check.outcome_diff``).

Which side is blamed follows from who agrees with whom:

- live agrees with neither model: real Envoy does something no model says (a
  gap in both models, or an Envoy bug) -> ``live``;
- live agrees with the Envoy model only: the xDS does what the Envoy model
  says and the spec says otherwise, so the xDS is wrong and real Envoy
  confirms it -> ``xds``; unless live also meets the case's own expectation
  (written from the upstream conformance test), in which case it is our
  reading of the spec that stands alone -> ``spec-model``, for review;
- live agrees with the spec model only: the Envoy model mispredicts real
  Envoy on this xDS -> ``envoy-model``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.check import outcome_diff
from verifier.semantics.cases import possible_statuses
from verifier.semantics.request import Outcome

# Headers the client stack or Envoy add on their own; neither model predicts them.
UNMODELLED_REQUEST_HEADERS = frozenset({"content-length", "user-agent", "accept-encoding", "te"})

ODD_LIVE = "live"
ODD_XDS = "xds"
ODD_SPEC = "spec-model"
ODD_ENVOY = "envoy-model"


def live_mismatches(model: Outcome, live: Outcome) -> list[str]:
    """Why a live answer is not one ``model`` allows; empty when it is.

    Only what the wire shows is compared: a live request lands on one
    backend, which must have a positive share in the model (or be a Service
    the model says shares its pods); timeouts and weights are configuration.
    """
    if live.status not in possible_statuses(model):
        return [f"status {live.status}, model allows {sorted(possible_statuses(model))}"]
    problems: list[str] = []
    if live.status == 200 and model.backends and live.backends:
        allowed = {
            key
            for b in model.backends
            if b.weight > 0
            for key in ((b.namespace, b.name, b.port), *b.aliases)
        }
        got = {(b.namespace, b.name, b.port) for b in live.backends}
        if not got <= allowed:
            problems.append(f"backend {sorted(got)}, model allows {sorted(allowed)}")
    if model.request is not None and live.request is not None and live.status == 200:
        m, lv = model.request, live.request
        if (m.host, m.path, m.method) != (lv.host, lv.path, lv.method):
            problems.append(
                f"backend saw {lv.method} {lv.host}{lv.path}, model {m.method} {m.host}{m.path}"
            )
        seen = {k: v for k, v in lv.headers if k not in UNMODELLED_REQUEST_HEADERS}
        if seen != dict(m.headers):
            problems.append(f"backend headers {seen}, model {dict(m.headers)}")
    mr, lr = model.redirect, live.redirect
    if (mr is not None or lr is not None) and (
        mr is None
        or lr is None
        or (mr.scheme, mr.host.lower(), mr.port, mr.path)
        != (lr.scheme, lr.host.lower(), lr.port, lr.path)
    ):
        problems.append(f"redirect {lr}, model {mr}")
    got_resp = dict(live.response_headers)
    for name, values in model.response_headers:
        if got_resp.get(name) != values and ",".join(got_resp.get(name, ())) != ",".join(values):
            problems.append(f"response {name}: {got_resp.get(name)}, model {list(values)}")
    for name in model.response_headers_removed:
        if name in got_resp:
            problems.append(f"response {name} present, model removes it")
    return problems


@dataclass(frozen=True)
class Verdict:
    """The three-way comparison of one request.

    ``spec_agrees``/``envoy_model_agrees``: does the live answer agree with that
    model; ``models_differ``: the fields on which the two models disagree
    (``check``'s own comparison); ``odd_one_out``: None when all three agree.
    """

    spec_agrees: bool
    envoy_model_agrees: bool
    models_differ: tuple[str, ...]
    odd_one_out: str | None
    spec_problems: tuple[str, ...] = ()
    envoy_problems: tuple[str, ...] = ()


def three_way(spec: Outcome, envoy: Outcome, live: Outcome, *, live_meets_case: bool) -> Verdict:
    """Compare the three answers and name the odd one out (module docstring)."""
    return verdict_of(
        spec, envoy, live_mismatches(spec, live), live_mismatches(envoy, live), live_meets_case
    )


def verdict_of(
    spec: Outcome,
    envoy: Outcome,
    spec_problems: list[str],
    envoy_problems: list[str],
    live_meets_case: bool,
) -> Verdict:
    """The verdict once each model's prediction has been compared with the live answer
    (``live_mismatches``; a mesh answer is named per model: ``mesh_runner``)."""
    models = outcome_diff(spec, envoy)
    spec_ok, envoy_ok = not spec_problems, not envoy_problems
    odd: str | None
    if spec_ok and envoy_ok:
        odd = None
    elif not spec_ok and not envoy_ok:
        odd = ODD_LIVE
    elif envoy_ok:
        odd = ODD_SPEC if live_meets_case else ODD_XDS
    else:
        odd = ODD_ENVOY
    return Verdict(spec_ok, envoy_ok, models, odd, tuple(spec_problems), tuple(envoy_problems))
