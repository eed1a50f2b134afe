"""Tests for verifier.xds.snapshot: config_dump I/O, per-type files, Envoy validation."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from envoy_data_plane.envoy.admin.v3 import (
    ClustersConfigDump,
    EndpointsConfigDump,
    ListenersConfigDump,
    RoutesConfigDump,
)
from envoy_data_plane.envoy.config.cluster.v3 import (
    Cluster,
    ClusterDiscoveryType,
    ClusterEdsClusterConfig,
    OutlierDetection,
)
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    AggregatedConfigSource,
    ApiVersion,
    ConfigSource,
    Metadata,
    SocketAddress,
    TransportSocket,
)
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain, Listener
from envoy_data_plane.envoy.config.route.v3 import (
    Route,
    RouteAction,
    RouteConfiguration,
    RouteMatch,
    VirtualHost,
)
from envoy_data_plane.envoy.extensions.filters.http.router.v3 import Router
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
    HttpFilter,
    Rds,
)
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CommonTlsContext,
    SdsSecretConfig,
    Secret,
    UpstreamTlsContext,
)
from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryResponse
from envoy_data_plane.google.protobuf import Struct

from verifier.xds.codec import XdsLoadError, from_json_dict, pack_any, to_json_dict
from verifier.xds.layout import as_served
from verifier.xds.snapshot import (
    Snapshot,
    bootstrap_for_validation,
    dumps,
    envoy_validate,
    find_envoy,
    from_config_dump,
    load_path,
    split_by_type,
    to_config_dump,
)

ADS = ConfigSource(ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3)


def _addr(host: str, port: int) -> Address:
    return Address(socket_address=SocketAddress(address=host, port_value=port))


def _assignment(name: str, host: str, port: int) -> ClusterLoadAssignment:
    endpoint = LbEndpoint(endpoint=Endpoint(address=_addr(host, port)))
    return ClusterLoadAssignment(
        cluster_name=name, endpoints=[LocalityLbEndpoints(lb_endpoints=[endpoint])]
    )


def _hcm(route_config_name: str = "rc-main", stat_prefix: str = "http") -> HttpConnectionManager:
    return HttpConnectionManager(
        stat_prefix=stat_prefix,
        rds=Rds(config_source=ADS, route_config_name=route_config_name),
        http_filters=[
            HttpFilter(name="envoy.filters.http.router", typed_config=pack_any(Router()))
        ],
    )


def _listener(hcm: HttpConnectionManager) -> Listener:
    hcm_filter = Filter(
        name="envoy.filters.network.http_connection_manager", typed_config=pack_any(hcm)
    )
    return Listener(
        name="http",
        address=_addr("0.0.0.0", 8080),
        filter_chains=[FilterChain(filters=[hcm_filter])],
    )


def _snapshot() -> Snapshot:
    tags = Struct.from_dict({"rule": "httproute/default/api", "index": 0, "tags": ["a", "b"]})
    routes = [
        Route(
            name="r1",
            match=RouteMatch(prefix="/api"),
            route=RouteAction(cluster="api", timeout=datetime.timedelta(seconds=15)),
            metadata=Metadata(filter_metadata={"verifier": tags}),
        ),
        Route(
            name="r2",
            match=RouteMatch(prefix="/"),
            route=RouteAction(cluster="web", timeout=datetime.timedelta(milliseconds=250)),
        ),
    ]
    return Snapshot(
        clusters=(
            # deliberately out of order: Snapshot sorts by name
            Cluster(
                name="web",
                type=ClusterDiscoveryType.STRICT_DNS,
                connect_timeout=datetime.timedelta(seconds=2, milliseconds=500),
                load_assignment=_assignment("web", "web.example.com", 80),
            ),
            Cluster(
                name="api",
                type=ClusterDiscoveryType.EDS,
                eds_cluster_config=ClusterEdsClusterConfig(eds_config=ADS),
                connect_timeout=datetime.timedelta(seconds=1),
                outlier_detection=OutlierDetection(consecutive_5xx=5),
            ),
        ),
        endpoints=(_assignment("api", "10.0.0.1", 8080),),
        listeners=(_listener(_hcm()),),
        routes=(
            RouteConfiguration(
                name="rc-main", virtual_hosts=[VirtualHost(name="vh", domains=["*"], routes=routes)]
            ),
        ),
    )


def _load(text: str) -> tuple[Snapshot, list[Any]]:
    return from_config_dump(json.loads(text), "test.json")


# --- round trip and output shape -------------------------------------------------------


def test_round_trip_is_equal_and_byte_stable() -> None:
    snap = _snapshot()
    assert [c.name for c in snap.clusters] == ["api", "web"]
    text = dumps(snap)
    assert text == dumps(_snapshot())
    assert text.endswith("}\n")
    loaded, notes = _load(text)
    assert notes == []
    assert loaded == snap
    assert dumps(loaded) == text


def test_config_dump_has_envoy_admin_shape() -> None:
    doc = to_config_dump(_snapshot())
    types = [c["@type"].rsplit(".", 1)[-1] for c in doc["configs"]]
    assert types == [
        "ClustersConfigDump",
        "EndpointsConfigDump",
        "ListenersConfigDump",
        "RoutesConfigDump",
    ]
    clusters, endpoints, listeners, routes = doc["configs"]
    assert [e["cluster"]["name"] for e in clusters["dynamic_active_clusters"]] == ["api", "web"]
    assert {e["version_info"] for e in clusters["dynamic_active_clusters"]} == {
        clusters["version_info"]
    }
    assert endpoints["dynamic_endpoint_configs"][0]["endpoint_config"]["cluster_name"] == "api"
    state = listeners["dynamic_listeners"][0]["active_state"]
    assert listeners["dynamic_listeners"][0]["name"] == "http"
    assert state["listener"]["@type"] == "type.googleapis.com/envoy.config.listener.v3.Listener"
    assert state["version_info"] == listeners["version_info"]
    assert routes["dynamic_route_configs"][0]["route_config"]["name"] == "rc-main"
    # every config is valid envoy.admin.v3 proto-JSON with nothing left over
    for config, cls in zip(
        doc["configs"],
        [ClustersConfigDump, EndpointsConfigDump, ListenersConfigDump, RoutesConfigDump],
        strict=True,
    ):
        _, notes = from_json_dict(cls, config)
        assert notes == []


def test_version_is_a_content_hash() -> None:
    snap = _snapshot()
    before = to_config_dump(snap)["configs"][0]["version_info"]
    changed = Snapshot(clusters=(*snap.clusters[:1], Cluster(name="web")))
    assert to_config_dump(changed)["configs"][0]["version_info"] != before
    assert to_config_dump(Snapshot(clusters=snap.clusters))["configs"][0]["version_info"] == before


def _camel_keys(doc: Any, keep: frozenset[str] = frozenset({"filter_metadata"})) -> Any:
    if isinstance(doc, list):
        return [_camel_keys(v) for v in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for key, value in doc.items():
        head, *rest = key.split("_")
        out[head + "".join(p[:1].upper() + p[1:] for p in rest)] = (
            value if key in keep else _camel_keys(value)
        )
    return out


def test_camel_case_input_equals_snake_case_input() -> None:
    snake = to_config_dump(_snapshot())
    camel = _camel_keys(snake)
    text = json.dumps(camel)
    for key in ["dynamicActiveClusters", "activeState", "routeConfigName", "consecutive5xx"]:
        assert key in text
    assert "filter_metadata" not in text and '"rule"' in text
    camel_snap, camel_notes = from_config_dump(camel, "camel")
    assert camel_notes == []
    assert camel_snap == from_config_dump(snake, "snake")[0] == _snapshot()


HAND_WRITTEN_CAMEL = """
{"configs": [
 {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
  "staticClusters": [{"cluster": {
   "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
   "name": "web", "type": "STRICT_DNS", "connectTimeout": "2.5s",
   "outlierDetection": {"consecutive5xx": 3, "baseEjectionTime": "30s"},
   "loadAssignment": {"clusterName": "web", "endpoints": [{"lbEndpoints": [{"endpoint":
     {"address": {"socketAddress": {"address": "web", "portValue": 80}}}}]}]}}}]},
 {"@type": "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
  "dynamicRouteConfigs": [{"versionInfo": "7", "routeConfig": {
   "@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
   "name": "rc", "virtualHosts": [{"name": "vh", "domains": ["*"], "routes": [
    {"match": {"safeRegex": {"regex": "/a.*"}}, "route": {"cluster": "web", "timeout": "1.5s"},
     "metadata": {"filterMetadata": {"f": {"someKey": 1}}}}]}]}}]}
]}
"""


def test_hand_written_camel_case_dump() -> None:
    snap, notes = from_config_dump(json.loads(HAND_WRITTEN_CAMEL), "camel.json")
    assert notes == []
    (cluster,) = snap.clusters
    assert cluster.connect_timeout == datetime.timedelta(seconds=2.5)
    assert cluster.outlier_detection == OutlierDetection(
        consecutive_5xx=3, base_ejection_time=datetime.timedelta(seconds=30)
    )
    route = snap.routes[0].virtual_hosts[0].routes[0]
    assert route.match.safe_regex is not None and route.match.safe_regex.regex == "/a.*"
    assert to_json_dict(route.metadata) == {"filter_metadata": {"f": {"someKey": 1}}}
    assert json.loads(dumps(snap))["configs"][0]["dynamic_active_clusters"][0]["cluster"][
        "outlier_detection"
    ] == {"consecutive_5xx": 3, "base_ejection_time": "30s"}


# --- what Envoy 1.40 itself prints ------------------------------------------------------------

# /config_dump?include_eds of Envoy 1.40 fed with split_by_type(_snapshot()) files through
# path_config_source (ads replaced by file paths); bootstrap trimmed, nothing else edited.
ENVOY_CONFIG_DUMP = """
{
 "configs": [
  {
   "@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump",
   "bootstrap": {
    "node": {
     "id": "n",
     "cluster": "c",
     "user_agent_name": "envoy"
    },
    "dynamic_resources": {
     "lds_config": {
      "resource_api_version": "V3",
      "path_config_source": {
       "path": "/etc/envoy/xds.listeners.json"
      }
     },
     "cds_config": {
      "resource_api_version": "V3",
      "path_config_source": {
       "path": "/etc/envoy/xds.clusters.json"
      }
     }
    }
   },
   "last_updated": "2026-11-29T16:54:22.510Z"
  },
  {
   "@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
   "version_info": "317d554af4a08b5e",
   "dynamic_active_clusters": [
    {
     "version_info": "317d554af4a08b5e",
     "cluster": {
      "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
      "name": "api",
      "type": "EDS",
      "eds_cluster_config": {
       "eds_config": {
        "resource_api_version": "V3",
        "path_config_source": {
         "path": "/etc/envoy/xds.endpoints.json"
        }
       }
      },
      "connect_timeout": "1s"
     },
     "last_updated": "2026-11-29T16:54:22.518Z"
    },
    {
     "version_info": "317d554af4a08b5e",
     "cluster": {
      "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
      "name": "web",
      "type": "STRICT_DNS",
      "connect_timeout": "2.500s",
      "load_assignment": {
       "cluster_name": "web",
       "endpoints": [
        {
         "lb_endpoints": [
          {
           "endpoint": {
            "address": {
             "socket_address": {
              "address": "web.example.com",
              "port_value": 80
             }
            }
           }
          }
         ]
        }
       ]
      }
     },
     "last_updated": "2026-11-29T16:54:22.518Z"
    }
   ]
  },
  {
   "@type": "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump",
   "dynamic_endpoint_configs": [
    {
     "endpoint_config": {
      "@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
      "cluster_name": "api",
      "endpoints": [
       {
        "locality": {},
        "lb_endpoints": [
         {
          "endpoint": {
           "address": {
            "socket_address": {
             "address": "10.0.0.1",
             "port_value": 8080
            }
           },
           "health_check_config": {}
          },
          "health_status": "HEALTHY",
          "load_balancing_weight": 1
         }
        ],
        "load_balancing_weight": 0
       }
      ],
      "policy": {
       "overprovisioning_factor": 140
      }
     }
    },
    {
     "endpoint_config": {
      "@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
      "cluster_name": "web",
      "policy": {
       "overprovisioning_factor": 140
      }
     }
    }
   ]
  },
  {
   "@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
   "version_info": "cc20eca4b8c92615",
   "dynamic_listeners": [
    {
     "name": "http",
     "active_state": {
      "version_info": "cc20eca4b8c92615",
      "listener": {
       "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
       "name": "http",
       "address": {
        "socket_address": {
         "address": "0.0.0.0",
         "port_value": 8080
        }
       },
       "filter_chains": [
        {
         "filters": [
          {
           "name": "envoy.filters.network.http_connection_manager",
           "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "http",
            "rds": {
             "config_source": {
              "resource_api_version": "V3",
              "path_config_source": {
               "path": "/etc/envoy/xds.routes.json"
              }
             },
             "route_config_name": "rc-main"
            },
            "http_filters": [
             {
              "name": "envoy.filters.http.router",
              "typed_config": {
               "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
              }
             }
            ]
           }
          }
         ]
        }
       ]
      },
      "last_updated": "2026-11-29T16:54:22.520Z"
     }
    }
   ]
  },
  {
   "@type": "type.googleapis.com/envoy.admin.v3.ScopedRoutesConfigDump"
  },
  {
   "@type": "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
   "dynamic_route_configs": [
    {
     "version_info": "fe30b242b49c8312",
     "route_config": {
      "@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
      "name": "rc-main",
      "virtual_hosts": [
       {
        "name": "vh",
        "domains": [
         "*"
        ],
        "routes": [
         {
          "match": {
           "prefix": "/api"
          },
          "route": {
           "cluster": "api",
           "timeout": "15s"
          },
          "metadata": {
           "filter_metadata": {
            "verifier": {
             "tags": [
              "a",
              "b"
             ],
             "index": 0,
             "rule": "httproute/default/api"
            }
           }
          },
          "name": "r1"
         },
         {
          "match": {
           "prefix": "/"
          },
          "route": {
           "cluster": "web",
           "timeout": "0.250s"
          },
          "name": "r2"
         }
        ]
       }
      ]
     },
     "last_updated": "2026-11-29T16:54:22.520Z"
    }
   ]
  },
  {
   "@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump"
  }
 ]
}
"""  # noqa: E501


def _without(doc: Any, keys: frozenset[str]) -> Any:
    if isinstance(doc, dict):
        return {k: _without(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [_without(v, keys) for v in doc]
    return doc


def test_loads_real_envoy_config_dump_and_writes_the_same_shape() -> None:
    envoy_doc = json.loads(ENVOY_CONFIG_DUMP)
    snap, notes = from_config_dump(envoy_doc, "envoy.json")
    # The bootstrap is read for the names it gives; an empty ScopedRoutesConfigDump
    # (every Envoy prints one) holds nothing to pass over.
    assert notes == []
    # SDS secrets are read (a DownstreamTlsContext may take its CAs from them),
    # never written: the translator inlines what it needs.
    assert all(s.name for s in snap.secrets)
    assert [c.name for c in snap.clusters] == ["api", "web"]
    assert [e.cluster_name for e in snap.endpoints] == ["api", "web"]
    # Our output for the same resources is what Envoy printed, timestamps and versions
    # aside, and the weight 0 Envoy prints for a locality that was given none.
    ignored = frozenset({"last_updated", "version_info"})
    ours = {c["@type"]: c for c in to_config_dump(snap)["configs"]}
    (eds,) = [c for c in envoy_doc["configs"] if c["@type"].endswith("EndpointsConfigDump")]
    for entry in eds["dynamic_endpoint_configs"]:
        entry["endpoint_config"] = as_served(entry["endpoint_config"])
    for config in envoy_doc["configs"]:
        if config["@type"] in ours:
            assert _without(ours.pop(config["@type"]), ignored) == _without(config, ignored)
    assert ours == {}


def test_a_dumped_locality_weight_of_0_is_read_as_unset_and_a_set_one_as_set() -> None:
    """Envoy prints ``load_balancing_weight: 0`` for a locality given no weight; served,
    0 is invalid (the minimum is 1) and Envoy's validate would reject the dump."""
    doc = json.loads(ENVOY_CONFIG_DUMP)
    (eds,) = [c for c in doc["configs"] if c["@type"].endswith("EndpointsConfigDump")]
    localities = eds["dynamic_endpoint_configs"][0]["endpoint_config"]["endpoints"]
    assert localities[0]["load_balancing_weight"] == 0
    localities.append(copy.deepcopy(localities[0]) | {"load_balancing_weight": 3})
    snap, _ = from_config_dump(doc, "d")
    api = next(e for e in snap.endpoints if e.cluster_name == "api")
    assert [loc.load_balancing_weight for loc in api.endpoints] == [None, 3]
    assert [ep.load_balancing_weight for loc in api.endpoints for ep in loc.lb_endpoints] == [1, 1]


def test_warming_and_draining_states_are_not_taken() -> None:
    doc = json.loads(ENVOY_CONFIG_DUMP)
    listeners = doc["configs"][3]["dynamic_listeners"]
    active = listeners[0]["active_state"]
    other = copy.deepcopy(active)
    other["listener"]["name"] = "warming-only"
    listeners[0]["draining_state"] = copy.deepcopy(active)
    listeners.append({"name": "warming-only", "warming_state": other})
    doc["configs"][1]["dynamic_warming_clusters"] = [
        {"cluster": {"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "new"}}
    ]
    snap, notes = from_config_dump(doc, "d")
    assert [li.name for li in snap.listeners] == ["http"]
    assert [c.name for c in snap.clusters] == ["api", "web"]
    reasons = {n.path: n.reason for n in notes}
    assert "not active" in reasons["d:$.configs[3].dynamic_listeners[0].draining_state"]
    assert "not active" in reasons["d:$.configs[3].dynamic_listeners[1].warming_state"]
    assert "no active_state" in reasons["d:$.configs[3].dynamic_listeners[1]"]
    assert "warming" in reasons["d:$.configs[1].dynamic_warming_clusters[0]"]


def test_keys_the_dumps_do_not_have_are_noted_not_passed_over() -> None:
    """A typo (``dynamic_active_cluster``) or a field this tool does not know is not
    read: a warning says so, in either spelling, rather than a silently emptier xDS."""
    doc = json.loads(ENVOY_CONFIG_DUMP)
    doc["surprise"] = 1
    clusters = doc["configs"][1]
    clusters["dynamicActiveCluster"] = clusters.pop("dynamic_active_clusters")
    doc["configs"][3]["dynamic_listeners"][0]["stateOfTheArt"] = {}
    snap, notes = from_config_dump(doc, "d")
    reasons = {n.path: n.reason for n in notes}
    assert reasons["d:$.surprise"] == "not a field of ConfigDump, not read"
    assert "ClustersConfigDump" in reasons["d:$.configs[1].dynamicActiveCluster"]
    assert "not read" in reasons["d:$.configs[3].dynamic_listeners[0].stateOfTheArt"]
    assert [c.name for c in snap.clusters] == []
    url = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    response = {"type_url": url, "resources": [], "nonce": "1", "extra": 2}
    _, notes = from_config_dump(response, "r")
    assert [str(n) for n in notes] == ["r:$.extra: not a field of DiscoveryResponse, not read"]


# --- lossy input -------------------------------------------------------------------------------


def test_digit_fields_load_and_unloadable_parts_are_noted() -> None:
    doc = json.loads(dumps(_snapshot()))
    cluster = doc["configs"][0]["dynamic_active_clusters"][0]["cluster"]
    assert cluster["outlier_detection"] == {"consecutive_5xx": 5}
    cluster["outlier_detection"]["consecutive_5xx"] = 7
    cluster["outlier_detection"]["enforcing_consecutive_5xx"] = 100
    cluster["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3": {}}
    hcm = doc["configs"][2]["dynamic_listeners"][0]["active_state"]["listener"]["filter_chains"][0][
        "filters"
    ][0]["typed_config"]
    hcm["http_protocol_options"] = {"accept_http_10": True}
    hcm["http_filters"].insert(0, {"name": "empty", "typed_config": {}})
    snap, notes = from_config_dump(doc, "f")
    assert snap.clusters[0].outlier_detection == OutlierDetection(
        consecutive_5xx=7, enforcing_consecutive_5xx=100
    )
    listener_json = to_json_dict(snap.listeners[0])
    hcm_out = listener_json["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm_out["http_protocol_options"] == {"accept_http_10": True}
    assert hcm_out["http_filters"][0]["name"] == "empty"
    assert "typed_config" not in hcm_out["http_filters"][0]
    listener_path = "f:$.configs[2].dynamic_listeners[0].active_state.listener"
    assert [(n.path, n.reason) for n in notes] == [
        (
            "f:$.configs[0].dynamic_active_clusters[0].cluster.typed_extension_protocol_options"
            '["envoy.extensions.upstreams.http.v3"]',
            "Any without @type",
        ),
        (
            f"{listener_path}.filter_chains[0].filters[0].typed_config.http_filters[0].typed_config",
            "Any without @type",
        ),
    ]


def test_other_resource_types_and_duplicates_are_noted() -> None:
    doc = [
        {"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "a"},
        {
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": "a",
            "type": "EDS",
        },
        {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
            "name": "s",
        },
        {
            "@type": "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration",
            "name": "x",
        },
        {"@type": "type.googleapis.com/acme.v1.Unknown", "name": "u"},
    ]
    snap, notes = from_config_dump(doc, "l")
    assert snap == Snapshot(clusters=(Cluster(name="a"),), secrets=(Secret(name="s"),))
    assert [n.path for n in notes] == ["l:$[1]", "l:$[3]", "l:$[4]"]
    assert "duplicate" in notes[0].reason


def test_discovery_responses_and_resource_lists() -> None:
    snap = _snapshot()
    parts = split_by_type(snap)
    assert set(parts) == {"clusters", "endpoints", "listeners", "routes"}
    for part in parts.values():
        _, notes = from_json_dict(DiscoveryResponse, part)
        assert notes == []
        assert all("@type" in r for r in part["resources"])
    assert from_config_dump(list(parts.values()), "drs") == (snap, [])
    assert from_config_dump(parts["clusters"], "dr")[0] == Snapshot(clusters=snap.clusters)
    plain = [r for part in parts.values() for r in part["resources"]]
    assert from_config_dump(plain, "list") == (snap, [])
    wrapped = {
        "type_url": parts["routes"]["type_url"],
        "resources": [
            {
                "@type": "type.googleapis.com/envoy.service.discovery.v3.Resource",
                "name": "rc-main",
                "resource": parts["routes"]["resources"][0],
            },
            parts["clusters"]["resources"][0],
        ],
    }
    loaded, notes = from_config_dump(wrapped, "w")
    assert loaded == Snapshot(routes=snap.routes)
    assert [n.path for n in notes] == ["w:$.resources[1]"]


MALFORMED: list[Any] = [
    42,
    "configs",
    None,
    {"something": "else"},
    {"configs": 5},
    {"configs": [5]},
    {"configs": [{"no": "type"}]},
    {"configs": [{"@type": ""}]},
    {
        "configs": [
            {
                "@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
                "dynamic_active_clusters": {"a": 1},
            }
        ]
    },
    {
        "configs": [
            {
                "@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
                "static_clusters": [{"cluster": "web"}],
            }
        ]
    },
    {
        "configs": [
            {
                "@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
                "dynamic_listeners": [7],
            }
        ]
    },
    {
        "configs": [
            {
                "@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
                "dynamic_listeners": [{"active_state": []}],
            }
        ]
    },
    {"resources": {"a": 1}},
    {"resources": [], "type_url": 3},
    {"resources": ["x"]},
    [1],
    [{"name": "no type"}],
]


@pytest.mark.parametrize("doc", MALFORMED)
def test_malformed_input_raises_xds_load_error(doc: Any) -> None:
    with pytest.raises(XdsLoadError) as info:
        from_config_dump(doc, "bad.json")
    assert info.value.path.startswith("bad.json:$")
    assert str(info.value).startswith(info.value.path + ": ")


# --- files -------------------------------------------------------------------------------------


def test_load_path_file_and_directories(tmp_path: Path) -> None:
    snap = _snapshot()
    dump = tmp_path / "config_dump.json"
    dump.write_text(dumps(snap))
    assert load_path(dump) == (snap, [])
    for naming in ["xds.{}.json", "xds.{}.golden.json"]:
        folder = tmp_path / naming.format("x")
        folder.mkdir()
        for kind, part in split_by_type(snap).items():
            (folder / naming.format(kind)).write_text(json.dumps(part, indent=2, sort_keys=True))
        assert load_path(folder) == (snap, [])
        assert load_path(str(folder)) == (snap, [])


def test_load_path_errors(tmp_path: Path) -> None:
    with pytest.raises(XdsLoadError, match="no such file or directory"):
        load_path(tmp_path / "missing.json")
    with pytest.raises(XdsLoadError, match="no xds"):
        load_path(tmp_path)
    (tmp_path / "xds.routes.json").write_text("{not json")
    with pytest.raises(XdsLoadError, match="invalid JSON"):
        load_path(tmp_path)
    (tmp_path / "xds.routes.golden.json").write_text("{}")
    with pytest.raises(XdsLoadError, match="both"):
        load_path(tmp_path)


# --- Envoy's own verdict ---------------------------------------------------------------------


def test_bootstrap_inlines_rds_and_eds() -> None:
    boot = bootstrap_for_validation(_snapshot())
    assert set(boot) == {"static_resources"}
    api, web = boot["static_resources"]["clusters"]
    assert api["type"] == "STATIC" and "eds_cluster_config" not in api
    assert api["load_assignment"]["cluster_name"] == "api"
    assert web["type"] == "STRICT_DNS"
    (listener,) = boot["static_resources"]["listeners"]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert "rds" not in hcm and hcm["route_config"]["name"] == "rc-main"
    missing = Snapshot(listeners=(_listener(_hcm("nope")),))
    with pytest.raises(ValueError, match="nope"):
        bootstrap_for_validation(missing)


def _tls_cluster() -> Cluster:
    """A mesh-style cluster whose certificates come over SDS, which a snapshot lacks."""
    ads_secret = SdsSecretConfig(name="default", sds_config=ADS)
    tls = UpstreamTlsContext(
        common_tls_context=CommonTlsContext(tls_certificate_sds_secret_configs=[ads_secret]),
        sni="backend.mesh.svc.cluster.local",
    )
    return Cluster(
        name="mesh",
        type=ClusterDiscoveryType.STRICT_DNS,
        load_assignment=_assignment("mesh", "backend.mesh.svc.cluster.local", 443),
        transport_socket=TransportSocket(name="tls", typed_config=pack_any(tls)),
    )


def test_bootstrap_points_sds_at_a_file() -> None:
    assert "node" not in bootstrap_for_validation(_snapshot())
    boot = bootstrap_for_validation(Snapshot(clusters=(_tls_cluster(),)), secrets_path="/s.json")
    assert set(boot["node"]) == {"id", "cluster"}
    socket = boot["static_resources"]["clusters"][0]["transport_socket"]["typed_config"]
    (secret,) = socket["common_tls_context"]["tls_certificate_sds_secret_configs"]
    assert secret == {
        "name": "default",
        "sds_config": {"path_config_source": {"path": "/s.json"}, "resource_api_version": "V3"},
    }


needs_envoy = pytest.mark.skipif(find_envoy() is None, reason="no envoy binary")


@needs_envoy
def test_envoy_accepts_round_tripped_snapshot() -> None:
    loaded, _ = _load(dumps(_snapshot()))
    ok, output = envoy_validate(loaded)
    assert ok, output
    assert "OK" in output


@needs_envoy
def test_envoy_accepts_sds_clusters() -> None:
    snap = _snapshot()
    ok, output = envoy_validate(Snapshot(clusters=(*snap.clusters, _tls_cluster())))
    assert ok, output


@needs_envoy
def test_envoy_rejections_come_back_with_envoy_text() -> None:
    snap = _snapshot()
    bad = Snapshot(
        clusters=snap.clusters,
        endpoints=snap.endpoints,
        routes=snap.routes,
        listeners=(_listener(_hcm(stat_prefix="")),),  # PGV: stat_prefix min_len 1
    )
    ok, output = envoy_validate(bad)
    assert not ok
    assert "StatPrefix" in output or "stat_prefix" in output, output
    ok, output = envoy_validate(Snapshot(listeners=(_listener(_hcm("nope")),)))
    assert not ok and "nope" in output


def test_binary_bootstrap_is_used_without_eds_or_tls_and_envoy_still_judges_it() -> None:
    """The fast path (a .pb bootstrap) must give Envoy the same verdicts as the JSON one."""
    import dataclasses

    from verifier.gatewayapi.attach import build_graph
    from verifier.gatewayapi.resources import load_resources
    from verifier.translate import translate
    from verifier.xds.snapshot import binary_bootstrap, bootstrap_for_validation, envoy_validate

    if find_envoy() is None:
        pytest.skip("no envoy binary")
    res = load_resources(["fixtures/base", "fixtures/httproute-query-param-matching"])
    snap = translate(res, build_graph(res))
    assert binary_bootstrap(snap) is not None
    assert bootstrap_for_validation(snap)  # the JSON path still exists for EDS/TLS
    assert envoy_validate(snap)[0]
    duplicate = dataclasses.replace(snap, clusters=(*snap.clusters, snap.clusters[0]))
    ok, output = envoy_validate(duplicate)
    assert not ok and "duplicate" in output.lower(), output
