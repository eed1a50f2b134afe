"""Read Kubernetes YAML into raw objects that remember where every field came from.

Findings and input errors must point at the YAML line a person would edit, so
the loader keeps a field-path -> line table per object instead of throwing the
positions away as ``yaml.safe_load`` does. Everything else (typing, defaults,
validation) happens later, on these raw objects.
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from verifier.errors import InputError, InputErrors
from verifier.inputs import (
    COMPOSER,
    HOSTILE,
    STDIN,
    check_yaml_shape,
    read_stdin,
    read_text,
    yaml_problem,
)

YAML_SUFFIXES = (".yaml", ".yml")
STR_TAG = "tag:yaml.org,2002:str"
# Files in a scenario's folder that describe expectations, not cluster resources, and
# what each is: a folder given skips them, and one named as a resource file (a glob,
# ``check store/*.yaml``) is told apart from a malformed resource by this.
CASES = "cases.yaml"
NOT_RESOURCES = {
    CASES: (
        "a cases table, not Kubernetes objects: check, run and live pick up the cases.yaml "
        "of the folder of a path they are given by themselves, or take one with --cases"
    ),
    "expected-errors.yaml": "the errors a negative scenario of a suite expects",
    "expected-findings.yaml": (
        "the findings a scenario declares, read from the folder of a path given"
    ),
    "expected-status.yaml": "the status a scenario of a suite expects",
    "mesh-registry.yaml": (
        "a mesh registry, read from the folder of a path given, or given with --mesh-registry"
    ),
}


def is_resource_file(name: str) -> bool:
    """Goldens and expectation files live beside resources but are not resources."""
    return name.endswith(YAML_SUFFIXES) and name not in NOT_RESOURCES and ".golden." not in name


@dataclass(frozen=True)
class Location:
    """A place in an input file; 1-based line as editors show it."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class Lines(Mapping[str, int]):
    """A field path -> line table, kept marshalled until a line is asked for.

    Most objects are never asked (a line is wanted for a finding or an error), and
    as a dict the table of an HTTPRoute of 10 rules took 27 KB, as much as its
    data; marshalled it is 7.7 KB, and a child loading the YAML sends it back as
    one string of bytes. Read-only: the loader builds the table, then wraps it.
    """

    __slots__ = ("_packed", "_table")

    def __init__(self, table: Mapping[str, int]) -> None:
        self._packed = marshal.dumps(dict(table))
        self._table: dict[str, int] | None = None

    def _open(self) -> dict[str, int]:
        if self._table is None:
            self._table = marshal.loads(self._packed)
        return self._table

    def __getitem__(self, path: str) -> int:
        return self._open()[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._open())

    def __len__(self) -> int:
        return len(self._open())

    def __repr__(self) -> str:
        return f"Lines({self._open()!r})"

    def __getstate__(self) -> bytes:
        return self._packed

    def __setstate__(self, packed: bytes) -> None:
        self._packed, self._table = packed, None


@dataclass
class RawObject:
    """One Kubernetes object as written, with the line of every field.

    ``lines`` maps a field path such as ``spec.rules[0].matches[1].path.value``
    to the line of its key (or list item); ``""`` is the object itself.
    """

    data: dict[str, Any]
    file: str
    lines: Mapping[str, int] = field(default_factory=dict)
    # Read from an API server (``edge-verify ... --kubeconfig``), which has decoded and
    # stored it already; False for a file's object, which no API server has seen yet.
    served: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.lines, Lines):
            self.lines = Lines(self.lines)

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.data.get("apiVersion", ""))

    @property
    def group(self) -> str:
        av = self.api_version
        return av.split("/", 1)[0] if "/" in av else ""

    @property
    def name(self) -> str:
        meta = self.data.get("metadata")
        return str(meta.get("name", "")) if isinstance(meta, dict) else ""

    @property
    def namespace(self) -> str:
        meta = self.data.get("metadata")
        return str(meta.get("namespace", "") or "") if isinstance(meta, dict) else ""

    @property
    def loc(self) -> Location:
        return Location(self.file, self.lines.get("", 1))

    def line_of(self, path: str) -> int:
        """The line of ``path`` or of its nearest ancestor that has one."""
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return 1
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""

    def where(self, path: str) -> Location:
        return Location(self.file, self.line_of(path))


@dataclass
class LoadResult:
    objects: list[RawObject] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


class _Builder:
    """Turns a composed YAML node tree into plain data plus a line table."""

    def __init__(self, file: str, errors: list[InputError], *, anchors: bool = True) -> None:
        self.file = file
        self.errors = errors
        self.anchors = anchors  # whether the text may define any (else the nodes are trees)
        self._construct = yaml.SafeLoader(stream="")
        # Set when a scalar could not be read: the document is then reported,
        # not checked (its fields would raise follow-on "missing" errors).
        self.broken = False

    def build(self, node: yaml.Node, path: str, lines: dict[str, int]) -> Any:
        lines.setdefault(path, node.start_mark.line + 1)
        # Aliases make the composed tree a graph; building expands it, so its
        # shape (depth, lengths, expansion) is judged first, on the graph.
        check_yaml_shape(node, self.file, anchors=self.anchors)
        return self._value(node, path, lines)

    def _value(self, node: yaml.Node, path: str, lines: dict[str, int]) -> Any:
        """``build`` below the top: the caller has just recorded ``path``'s line."""
        if type(node) is yaml.ScalarNode and node.tag == STR_TAG:
            return node.value  # most nodes: what SafeConstructor.construct_yaml_str returns
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            prefix = f"{path}." if path else ""
            for knode, vnode in node.value:
                key = self._scalar(knode, prefix + str(knode.value))
                if not isinstance(key, str):
                    key = str(key)
                child = prefix + key
                if key in out:
                    self.errors.append(
                        InputError(
                            self.file,
                            knode.start_mark.line + 1,
                            child,
                            "duplicate-key",
                            f"key {key!r} appears twice in the same mapping",
                        )
                    )
                    continue
                lines[child] = knode.start_mark.line + 1
                out[key] = self._value(vnode, child, lines)
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                child = f"{path}[{i}]"
                lines[child] = item.start_mark.line + 1
                items.append(self._value(item, child, lines))
            return items
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: str) -> Any:
        if isinstance(node, yaml.ScalarNode):
            if node.tag == STR_TAG:
                return node.value  # what SafeConstructor.construct_yaml_str returns
            # The constructor would keep every node it built alive until the end of the
            # file; a scalar has no identity to share, so let the node go.
            try:
                value = self._construct.construct_object(node, deep=True)
            except Exception:
                # An explicit tag the text does not fit (`!!int nope`, `!!timestamp zz`):
                # PyYAML's constructors raise ValueError, AttributeError..., not YAMLError.
                self.broken = True
                self._construct.constructed_objects.pop(node, None)
                self._construct.recursive_objects.pop(node, None)
                tag = node.tag.rsplit(":", 1)[-1]
                self.errors.append(
                    InputError(
                        self.file,
                        node.start_mark.line + 1,
                        path,
                        "yaml-syntax",
                        f"invalid YAML: {node.value!r} is not a valid !!{tag}",
                    )
                )
                return None
            del self._construct.constructed_objects[node]
            return value
        # A complex key: rare in Kubernetes YAML; keep its text.
        return str(node.value)


class _Composer(COMPOSER):  # type: ignore[misc,valid-type]
    """COMPOSER remembering each plain scalar's implicit tag, which depends on its text only.

    The resolver runs up to a dozen regular expressions per scalar, and Kubernetes YAML
    repeats the same keys and values over and over.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._implicit_tags: dict[str, str] = {}

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is not yaml.ScalarNode or not implicit[0] or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]
        tag = self._implicit_tags.get(value)
        if tag is None:
            tag = self._implicit_tags[value] = super().resolve(kind, value, implicit)
        return tag


def _documents(text: str, file: str, errors: list[InputError]) -> Iterator[RawObject]:
    builder = _Builder(file, errors, anchors="&" in text)
    try:
        for node in yaml.compose_all(text, Loader=_Composer):
            if node is None:
                continue
            lines: dict[str, int] = {}
            builder.broken = False
            data = builder.build(node, "", lines)
            if data is None or builder.broken:
                continue
            if not isinstance(data, dict):
                errors.append(_not_an_object(file, node.start_mark.line + 1))
                continue
            yield from _unwrap_lists(RawObject(data, file, lines))
    except InputErrors as exc:
        errors.extend(exc.errors)
    except (yaml.YAMLError, *HOSTILE) as exc:
        errors.append(yaml_problem(exc, file))


def _not_an_object(file: str, line: int) -> InputError:
    """A document that is not an object: in a file a scenario's folder holds for
    another purpose (a cases table given among the resources by a glob), say what the
    file is and how it is given, rather than what shape a resource has."""
    what = NOT_RESOURCES.get(Path(file).name)
    if what is not None:
        return InputError(file, line, "", "not-resources", f"this is {what}")
    return InputError(
        file, line, "", "type", "expected a Kubernetes object (a mapping with apiVersion and kind)"
    )


def _unwrap_lists(obj: RawObject) -> Iterator[RawObject]:
    """`kubectl get -o yaml` wraps objects in a List; flatten it keeping lines."""
    if obj.kind.endswith("List") and isinstance(obj.data.get("items"), list):
        for i, item in enumerate(obj.data["items"]):
            prefix = f"items[{i}]"
            sub = {
                k[len(prefix) + 1 :] if k != prefix else "": v
                for k, v in obj.lines.items()
                if k == prefix or k.startswith(prefix + ".") or k.startswith(prefix + "[")
            }
            if isinstance(item, dict):
                yield from _unwrap_lists(RawObject(item, obj.file, sub))
        return
    yield obj


def _expand(paths: Sequence[str]) -> Iterator[str]:
    for p in paths:
        if p == "-":
            yield p
            continue
        path = Path(p)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if is_resource_file(name):
                        yield str(Path(root) / name)
        else:
            yield p


def load_texts(sources: Iterable[tuple[str, str]]) -> LoadResult:
    """Parse (file name, text) pairs; errors are collected, never raised."""
    result = LoadResult()
    for file, text in sources:
        result.files.append(file)
        result.objects.extend(_documents(text, file, result.errors))
    return result


def load_paths(paths: Sequence[str]) -> LoadResult:
    """Read files, directories (recursively, sorted) and ``-`` for stdin."""
    sources: list[tuple[str, str]] = []
    missing: list[InputError] = []
    for p in _expand(paths):
        try:
            sources.append((STDIN, read_stdin()) if p == "-" else (p, read_text(p)))
        except InputErrors as exc:
            missing.extend(exc.errors)
    result = load_texts(sources)
    result.errors[:0] = missing
    return result
