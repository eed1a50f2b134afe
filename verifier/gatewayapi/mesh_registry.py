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

# What the file holds, said wherever it holds something else.
EXPECTED = (
    "a mesh registry file holds one mapping, services: a list of the Services on the mesh "
    "path besides labelled namespaces, each {namespace, name} or 'namespace/name' "
    "(docs/inputs.md)"
)


def _not_a_registry(err: InputError) -> InputError:
    """The loader's word for a document that is no mapping (expected a Kubernetes
    object; a cases table) said as what a registry file is: the loader reads Kubernetes
    objects, this file is not one."""
    if err.field or err.code not in ("type", "not-resources"):
        return err
    what = "this is a cases table (give it with --cases); " if err.code == "not-resources" else ""
    return InputError(err.file, err.line, "", "not-registry", f"{what}{EXPECTED}")


def load_mesh_registry(path: str) -> frozenset[tuple[str, str]]:
    """(namespace, service) pairs; every problem is reported with its line."""
    text = read_text(path)
    loaded = load_texts([(path, text)])
    errors = [_not_a_registry(e) for e in loaded.errors]
    found: set[tuple[str, str]] = set()
    objects = [doc for doc in loaded.objects if "kind" in doc.data]
    if objects:  # resources given for the registry: said once, at the first
        kinds = sorted({str(doc.data["kind"]) for doc in objects})
        message = f"this holds Kubernetes objects (kind {', '.join(kinds)}); {EXPECTED}"
        errors.append(InputError(path, objects[0].line_of("kind"), "", "not-registry", message))
    for doc in loaded.objects:
        if "kind" in doc.data:
            continue
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
