"""The mesh registry file: Services on the mesh path besides labelled namespaces.

aether registers workloads in the mesh by namespace label; a registry file lets
a user name individual Services too (for example a namespace being migrated).
Format (YAML)::

    services:
      - namespace: shop
        name: checkout
      - payments/ledger        # "namespace/name" shorthand
"""

from __future__ import annotations

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.load import load_texts
from verifier.inputs import read_text


def load_mesh_registry(path: str) -> frozenset[tuple[str, str]]:
    """(namespace, service) pairs; every problem is reported with its line."""
    text = read_text(path)
    loaded = load_texts([(path, text)])
    errors = list(loaded.errors)
    found: set[tuple[str, str]] = set()
    for doc in loaded.objects:
        for key in sorted(set(doc.data) - {"services"}):
            errors.append(
                InputError(
                    path,
                    doc.line_of(key),
                    key,
                    "unknown-field",
                    "unknown field (expected services)",
                )
            )
        entries = doc.data.get("services")
        if not isinstance(entries, list):
            errors.append(
                InputError(
                    path,
                    doc.line_of("services"),
                    "services",
                    "type" if "services" in doc.data else "required",
                    "expected a list of {namespace, name} or 'namespace/name'",
                )
            )
            continue
        for i, entry in enumerate(entries):
            where = doc.line_of(f"services[{i}]")
            if isinstance(entry, str) and entry.count("/") == 1 and all(entry.split("/")):
                ns, name = entry.split("/")
                found.add((ns, name))
            elif isinstance(entry, dict) and entry.get("namespace") and entry.get("name"):
                found.add((str(entry["namespace"]), str(entry["name"])))
                for key in sorted(set(entry) - {"namespace", "name"}):
                    errors.append(
                        InputError(
                            path,
                            doc.line_of(f"services[{i}].{key}"),
                            f"services[{i}].{key}",
                            "unknown-field",
                            "unknown field (expected namespace and name)",
                        )
                    )
            else:
                errors.append(
                    InputError(
                        path,
                        where,
                        f"services[{i}]",
                        "type",
                        "expected {namespace, name} or 'namespace/name'",
                    )
                )
    if errors:
        raise InputErrors(errors)
    return frozenset(found)
