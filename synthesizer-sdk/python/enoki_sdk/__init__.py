"""enoki's Python SDK: read the ResourceList from stdin, build resources, write the output.

A synthesizer is a plain function from the input ResourceList to a list of resources (dicts)::

    from enoki_sdk import ResourceList, resource, readiness_group, main

    def synthesize(rl: ResourceList) -> list[dict]:
        cfg = rl.input("config")
        return [resource("v1", "ConfigMap", cfg["metadata"]["name"] + "-out")]

    class Run:  # the wasi:cli/run export componentize-py looks for
        def run(self) -> None:
            main(synthesize)

Standard library only: the same code runs under CPython for tests and inside the component
built by componentize-py. The contract is ``synthesizer-sdk/CONTRACT.md``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Iterable, Optional, Union

__all__ = [
    "Result",
    "ResourceList",
    "SynthesisError",
    "annotate",
    "label",
    "main",
    "readiness",
    "readiness_group",
    "render",
    "resource",
]

INPUT_KEY = "enoki.dev/input-key"
OBSERVED = "enoki.dev/observed"

Object = dict  # a Kubernetes object as plain JSON data


class SynthesisError(Exception):
    """Raised by a synthesizer to fail the synthesis with a clear message (an `error` result)."""


class Result(dict):
    """A `results[]` entry: severity `error`, `warning` or `info`, a message, optionally the
    resource it is about (`{"apiVersion", "kind", "name", "namespace"}`)."""

    def __init__(self, severity: str, message: str, resource_ref: Optional[dict] = None):
        super().__init__(severity=severity, message=message)
        if resource_ref is not None:
            self["resourceRef"] = resource_ref


def _annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


class ResourceList:
    """The input: bound inputs (annotated with their key), observed outputs and the
    functionConfig (composition name/namespace and env)."""

    def __init__(self, doc: dict):
        if not isinstance(doc, dict) or doc.get("kind") != "ResourceList":
            raise SynthesisError("stdin is not a ResourceList")
        self.doc = doc
        self.items: list = list(doc.get("items") or [])
        self.function_config: dict = dict(doc.get("functionConfig") or {})

    def inputs(self, key: str) -> list:
        """Every item bound under `key` (a collection gives several), observed outputs excluded."""
        return [
            i for i in self.items
            if _annotations(i).get(INPUT_KEY) == key and _annotations(i).get(OBSERVED) != "true"
        ]

    def input(self, key: str, optional: bool = False) -> Optional[dict]:
        """The one item bound under `key`; a missing required input raises SynthesisError."""
        found = self.inputs(key)
        if not found:
            if optional:
                return None
            raise SynthesisError(f"input {key!r} is missing from the ResourceList")
        return found[0]

    def observed(self) -> list:
        """The live state of what the previous synthesis emitted (`enoki.dev/observed`)."""
        return [i for i in self.items if _annotations(i).get(OBSERVED) == "true"]

    @property
    def composition(self) -> dict:
        """`{"name", "namespace", ...}` of the Composition being synthesized."""
        return dict(self.function_config.get("composition") or {})

    @property
    def env(self) -> dict:
        return dict(self.function_config.get("env") or {})


def resource(api_version: str, kind: str, name: str, namespace: Optional[str] = None, **fields: Any) -> dict:
    """A resource skeleton; extra keyword arguments become top-level fields (`spec=…`, `data=…`).
    Namespaced kinds without a namespace get the Composition's."""
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    obj.update(fields)
    return obj


def annotate(obj: dict, key: str, value: str) -> dict:
    obj.setdefault("metadata", {}).setdefault("annotations", {})[key] = value
    return obj


def label(obj: dict, key: str, value: str) -> dict:
    obj.setdefault("metadata", {}).setdefault("labels", {})[key] = value
    return obj


def readiness_group(obj: dict, group: int) -> dict:
    """`enoki.dev/readiness-group`: lower groups are applied (and Ready) first."""
    return annotate(obj, "enoki.dev/readiness-group", str(int(group)))


def readiness(obj: dict, cel: str, name: Optional[str] = None) -> dict:
    """A CEL readiness check over `self` (`enoki.dev/readiness`, or `readiness-<name>`)."""
    return annotate(obj, "enoki.dev/readiness" + (f"-{name}" if name else ""), cel)


Synthesize = Callable[[ResourceList], Union[Iterable[dict], tuple]]


def render(synthesize: Synthesize, doc: dict) -> dict:
    """Run `synthesize` over a ResourceList document and return the output ResourceList.
    `synthesize` returns resources, or `(resources, results)`. A SynthesisError becomes an
    `error` result (the synthesis fails with its message; nothing is applied)."""
    results: list = []
    try:
        out = synthesize(ResourceList(doc))
        if isinstance(out, tuple):
            out, results = out[0], list(out[1])
        items = list(out)
    except SynthesisError as e:
        items, results = [], [Result("error", str(e))]
    return {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": items, "results": results}


def main(synthesize: Synthesize, stdin: Any = None, stdout: Any = None) -> None:
    """Read the ResourceList from stdin, run `synthesize`, write the result to stdout."""
    src = stdin if stdin is not None else sys.stdin
    dst = stdout if stdout is not None else sys.stdout
    try:
        doc = json.load(src)
    except ValueError as e:
        doc = {}
        print(f"enoki_sdk: stdin is not JSON: {e}", file=sys.stderr)
    json.dump(render(synthesize, doc), dst, separators=(",", ":"), sort_keys=True)
    dst.flush()
