"""No HTTPRoute match is dead: an identical match of another rule does not take all its requests.

Why it matters: when two HTTPRoutes (or two rules of one) write the same match for
the same hostname on the same listener, the spec gives every request both accept to
one of them: "the oldest Route based on creation timestamp", then "the Route
appearing first in alphabetical order by "{namespace}/{name}"", then "the FIRST
matching rule (in list order)". The other never gets traffic, whatever its backends
and filters say, and a correct translation agrees, so the models agree and no case
of the winner's requests can tell: a copy left behind, a canary meant to differ by a
header, a rename that kept the old route. This rule reports the losing match at its
own line (EV915), names the winner and the criterion that decided, and gives the
winner's match as related. It reads the spec model's own attachment and precedence
(``verifier.semantics.spec.identical``), never the translator's, so on the xDS
``unreachable-routes`` (EV402) leaves such pairs to it: one mistake, one finding.
A match is reported only when it loses on every listener and hostname it is served
on; a duplicate within one rule is harmless (its requests go to the same rule).

Example: HTTPRoutes ``shop/orders`` and ``shop/orders-v2``, both ``PathPrefix /orders``
on ``orders.shop.example.com``, neither with a creationTimestamp: ``shop/orders`` wins
on ``"{namespace}/{name}" alphabetical order``, and ``shop/orders-v2``'s match is
EV915 at its line.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support.mistakes import at

from verifier.check import Context
from verifier.findings import Finding, Related
from verifier.registry import Rule
from verifier.semantics.spec.identical import Placed, unreached_matches

NAME = "httproute-identical-matches"
CODE = "EV915"


def _path(p: Placed) -> str:
    return p.match.path_ or p.rule.path


def check(ctx: Context) -> Iterable[Finding]:
    for found in unreached_matches(ctx.res, ctx.controller_name):
        winner = found.winner.route.meta.where(_path(found.winner))
        what = f"the match that wins: {found.winner.describe()}"
        yield at(
            CODE,
            NAME,
            found.loser.route.meta,
            _path(found.loser),
            actual={"winner": found.winner.describe(), "criterion": found.criterion},
            related=(Related(winner.file, winner.line, what),),
            match=found.loser.describe(),
            winner=found.winner.describe(),
            hostname=found.hostname or "any hostname",
            listener=found.listener,
            gateway="/".join(found.gateway),
            criterion=found.criterion,
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule",
    doc=(__doc__ or "").strip(),
    check=check,
)
