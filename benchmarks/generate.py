"""Generated Gateway API configurations of a given size, for scaling runs.

Shapes resemble a real edge: many HTTPRoutes across hostnames, each with a few
rules mixing exact and prefix paths, header and query matches, filters and
weighted backends, so every part of the pipeline is exercised, not only the
cheapest path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

RULES_PER_ROUTE = 10
HOSTS = 50


def _rule(r: int, i: int) -> dict[str, object]:
    kind = i % 5
    match: dict[str, object]
    if kind == 0:
        match = {"path": {"type": "Exact", "value": f"/r{r}/exact{i}"}}
    elif kind == 1:
        match = {"path": {"type": "PathPrefix", "value": f"/r{r}/p{i}"}}
    elif kind == 2:
        match = {
            "path": {"type": "PathPrefix", "value": f"/r{r}/h{i}"},
            "headers": [{"name": "X-Version", "value": f"v{i}"}],
        }
    elif kind == 3:
        match = {
            "path": {"type": "PathPrefix", "value": f"/r{r}/q{i}"},
            "queryParams": [{"name": "flag", "value": f"on{i}"}],
            "method": "POST",
        }
    else:
        match = {"path": {"type": "RegularExpression", "value": f"/r{r}/re{i}/[0-9]+"}}
    rule: dict[str, object] = {
        "matches": [match],
        "backendRefs": [
            {"name": "infra-backend-v1", "port": 8080, "weight": 90},
            {"name": "infra-backend-v2", "port": 8080, "weight": 10},
        ],
    }
    if i % 4 == 0:
        rule["filters"] = [
            {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": "X-Route", "value": f"r{r}-{i}"}]},
            }
        ]
    return rule


def gateways(n: int) -> list[dict[str, object]]:
    """``n`` Gateways of ours on port 80 without hostnames (the conformance suite's
    shape: per-Gateway addressing keeps them apart); none for n = 1 (base's)."""
    if n <= 1:
        return []
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": f"bench-{g}", "namespace": "edge-infra"},
            "spec": {
                "gatewayClassName": "aether",
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
            },
        }
        for g in range(n)
    ]


def routes(n_rules: int, n_gateways: int = 1) -> list[dict[str, object]]:
    out = []
    for r in range(max(1, n_rules // RULES_PER_ROUTE)):
        parent = "same-namespace" if n_gateways <= 1 else f"bench-{r % n_gateways}"
        out.append(
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": f"route-{r}", "namespace": "edge-infra"},
                "spec": {
                    "parentRefs": [{"name": parent}],
                    "hostnames": [f"host{r % HOSTS}.bench.example.com"],
                    "rules": [_rule(r, i) for i in range(RULES_PER_ROUTE)],
                },
            }
        )
    return out


def write(n_rules: int, directory: Path, n_gateways: int = 1) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "resources.yaml"
    docs = gateways(n_gateways) + routes(n_rules, n_gateways)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[1].isdigit():
        sys.exit("usage: python benchmarks/generate.py RULES DIR  (HTTPRoutes for fixtures/base)")
    print(write(int(sys.argv[1]), Path(sys.argv[2])))
