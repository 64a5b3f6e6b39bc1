"""Hypothesis strategies built from the CRDs' own OpenAPI schemas (``manifests/crds/``).

Only the subset the CRDs use: objects with ``properties``/``required``/``additionalProperties``,
``min/maxProperties``, arrays (``x-kubernetes-list-type: map`` keeps its keys unique), strings
with ``pattern``/``minLength``/``maxLength``, bounded integers, booleans,
``enum``, ``x-kubernetes-int-or-string`` and ``x-kubernetes-preserve-unknown-fields``. CEL rules
(``x-kubernetes-validations``) are not generated for: a value that breaks one is refused by the
API server, which is one of the outcomes the fuzz test accepts (with its message).

Sizes are kept small (a few items per list or map) so that a case costs the API server little.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.support import crds

#: Keys of maps that the schema cannot describe (``additionalProperties`` keys have no schema).
_RESOURCE_NAMES = st.sampled_from(["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "example.com/gpu"])
_QUALIFIED_KEYS = st.from_regex(r"\A([a-z]{1,8}\.(io|com)/)?[a-z][-a-z0-9_.]{0,10}[a-z0-9]\Z")
_PRINTABLE = st.text(alphabet=string.ascii_letters + string.digits + " -_./:=", max_size=24)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | _PRINTABLE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_PRINTABLE, inner, max_size=3),
    max_leaves=8,
)


def crd_schema(file: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the first version of one of ``manifests/crds/``."""
    crd = yaml.safe_load((crds.CRDS / file).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _string(schema: Mapping[str, Any]) -> st.SearchStrategy[str]:
    low, high = int(schema.get("minLength", 0)), int(schema.get("maxLength", 32))
    pattern = schema.get("pattern")
    if pattern:
        return st.from_regex(pattern, fullmatch=True).filter(lambda s: low <= len(s) <= high)
    return st.text(alphabet=st.characters(codec="utf-8"), min_size=low, max_size=min(high, max(low, 24)))


def _keys(path: str) -> st.SearchStrategy[str]:
    return _RESOURCE_NAMES if path.endswith(("limits", "requests")) else _QUALIFIED_KEYS


def strategy(schema: Mapping[str, Any], *, path: str = "") -> st.SearchStrategy[Any]:
    """Values valid for ``schema``'s types, patterns and bounds (not for its CEL rules)."""
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if schema.get("x-kubernetes-int-or-string"):
        low = int(schema.get("minimum", 0))
        return st.integers(min_value=low, max_value=10**6) | _string(schema)
    type_ = schema.get("type")
    if type_ == "object" or (type_ is None and schema.get("x-kubernetes-preserve-unknown-fields")):
        return _object(schema, path=path)
    if type_ == "array":
        items = strategy(schema.get("items") or {}, path=f"{path}[]")
        high = min(int(schema.get("maxItems", 3)), 3)
        keys = schema.get("x-kubernetes-list-map-keys")
        if keys:
            return st.lists(
                items, max_size=high, unique_by=lambda item: tuple(str(item.get(k)) for k in keys)
            )
        return st.lists(items, max_size=high)
    if type_ == "string":
        return _string(schema)
    if type_ == "integer":
        return st.integers(min_value=schema.get("minimum", -(2**31)), max_value=schema.get("maximum", 2**31))
    if type_ == "boolean":
        return st.booleans()
    return JSON


def _object(schema: Mapping[str, Any], *, path: str) -> st.SearchStrategy[Any]:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    low, high = int(schema.get("minProperties", 0)), int(schema.get("maxProperties", 3))
    if properties:
        required = [k for k in properties if k in set(schema.get("required") or [])]
        fields = {k: strategy(v, path=f"{path}.{k}") for k, v in properties.items()}
        if "maxProperties" in schema:  # E.g. valueFrom: exactly one source.
            others = [k for k in properties if k not in required]
            chosen = st.lists(
                st.sampled_from(others),
                min_size=max(0, low - len(required)),
                max_size=max(0, high - len(required)),
                unique=True,
            )
            return chosen.flatmap(
                lambda keys: st.fixed_dictionaries({k: fields[k] for k in [*required, *keys]})
            )
        return st.fixed_dictionaries(
            {k: fields[k] for k in required}, optional={k: fields[k] for k in properties if k not in required}
        )
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        return st.dictionaries(
            _keys(path), strategy(extra, path=f"{path}.*"), min_size=low, max_size=min(high, 3)
        )
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return st.dictionaries(_PRINTABLE, JSON, max_size=3)
    return st.just({})
