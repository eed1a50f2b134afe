"""Reading the files people give the tool, so that no input can end in a traceback.

Every file the tool reads (resources, cases tables, mesh registries, xDS JSON) goes
through these: bytes that are not UTF-8, nesting deeper than Python recurses, a YAML
tag or value the safe loader refuses, a self-referencing alias, an integer of
thousands of digits. Each becomes one ``file:line: message [code]`` input error
(exit 2), never a traceback: a verifier that crashes on hostile input checked nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from verifier.errors import InputError, InputErrors

# What Python raises from deep inside a parser on input it cannot represent:
# recursion (nesting, self-referencing aliases), and the safe loader's own
# ValueError/TypeError (`!!float x`, an unhashable `{[a]: 1}` key).
HOSTILE = (RecursionError, ValueError, TypeError, AttributeError, OverflowError)


def decode(data: bytes, path: str) -> str:
    """UTF-8 text, or an input error at the line of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputErrors(
            [InputError(path, line, "", "encoding", f"not UTF-8: byte {exc.object[exc.start]:#x}")]
        ) from None


def read_text(path: str) -> str:
    """A file's text; unreadable and non-UTF-8 files are input errors."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputErrors(
            [InputError(path, 0, "", "not-found", "no such file or directory")]
        ) from None
    except OSError as exc:
        raise InputErrors(
            [InputError(path, 0, "", "unreadable", exc.strerror or str(exc))]
        ) from None
    return decode(data, path)


STDIN = "<stdin>"


def read_stdin() -> str:
    """Standard input's text, decoded as a file's is: the console's text layer would
    raise UnicodeDecodeError from inside ``read`` on bytes that are not UTF-8."""
    if sys.stdin is None:  # started with no file descriptor 0 at all
        raise InputErrors([InputError(STDIN, 0, "", "unreadable", "no standard input")])
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream with no bytes under it (an embedding program's)
        return sys.stdin.read()
    return decode(buffer.read(), STDIN)


def yaml_problem(exc: BaseException, path: str) -> InputError:
    """The input error for whatever the YAML loader raised."""
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        return InputError(path, line, "", "yaml-syntax", f"invalid YAML: {problem}")
    if isinstance(exc, RecursionError):
        why = "nested too deep, or an alias that contains itself"
        return InputError(path, 1, "", "yaml-depth", why)
    return InputError(path, 1, "", "yaml-value", f"a value the safe loader refuses: {exc}")


def load_yaml(text: str, path: str) -> tuple[Any, yaml.Node | None]:
    """(data, node) of a one-document YAML text, with the safe loader only."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text) if node is not None else None
    except (yaml.YAMLError, *HOSTILE) as exc:
        raise InputErrors([yaml_problem(exc, path)]) from None
    return data, node


def load_json(text: str, path: str) -> Any:
    """JSON, with the failures ``json`` raises for hostile input turned into messages."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputErrors(
            [InputError(path, exc.lineno, "", "bad-json", f"invalid JSON: {exc.msg}")]
        ) from None
    except RecursionError:
        raise InputErrors([InputError(path, 1, "", "bad-json", "nested too deep")]) from None
    except ValueError as exc:  # an integer of thousands of digits, among others
        raise InputErrors([InputError(path, 1, "", "bad-json", str(exc))]) from None
