"""The DynamoGraphDeployment CRD, cut to the fields trtspec's graphs and Dynamo's own template use.

The CRD (1.6 MB) cannot be vendored or installed here, so the schema nodes that the checked
documents reach are kept as data (dgd_crd_v1beta1.json): per path, the node's type, the names of
its fields (every name the CRD lists there, not only those used), required fields, enums, minimum,
and whether it takes any key. `check` then runs on every machine without the CRD; where
TRTSPEC_DGD_CRD names the CRD file, test_graph_crd.py rebuilds the data from it and requires it to
equal the committed file, so the names are the CRD's, not ours.

Paths: `spec.components[]` for an array's items, `metadata.labels.*` for a map's values.
"""

from __future__ import annotations

from typing import Any

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,),
                                              "integer": (int,), "boolean": (bool,), "number": (int, float)}


def _summary(schema: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {}
    if "type" in schema:
        node["type"] = schema["type"]
    if schema.get("x-kubernetes-int-or-string"):
        node["int_or_string"] = True
    if "properties" in schema:
        node["fields"] = sorted(schema["properties"])
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("additionalProperties") is True:
        node["any_key"] = True
    elif isinstance(schema.get("additionalProperties"), dict):
        node["map"] = True
    elif schema.get("type") == "object" and "properties" not in schema:
        node["any_key"] = True
    for key in ("required", "enum"):
        if key in schema:
            node[key] = sorted(schema[key], key=str)
    if "minimum" in schema:
        node["minimum"] = schema["minimum"]
    return node


def extract(schema: dict[str, Any], documents: list[Any]) -> dict[str, dict[str, Any]]:
    """The summaries of the schema nodes the documents reach, by path."""
    nodes: dict[str, dict[str, Any]] = {}

    def walk(sub: dict[str, Any], value: Any, path: str) -> None:
        nodes[path] = _summary(sub)
        if isinstance(value, dict):
            for key, item in value.items():
                if key in sub.get("properties", {}):
                    walk(sub["properties"][key], item, f"{path}.{key}".lstrip("."))
                elif isinstance(sub.get("additionalProperties"), dict):
                    walk(sub["additionalProperties"], item, f"{path}.*".lstrip("."))
        elif isinstance(value, list) and isinstance(sub.get("items"), dict):
            for item in value:
                walk(sub["items"], item, f"{path}[]")

    for document in documents:
        walk(schema, document, "")
    return dict(sorted(nodes.items()))


def _type_errors(node: dict[str, Any], value: Any, path: str) -> list[str]:
    where = path or "(top)"
    if node.get("int_or_string"):
        return [] if isinstance(value, (int, str)) and not isinstance(value, bool) else [f"{where}: not an integer or string"]
    expected = node.get("type")
    if expected is None:
        return []
    ok = isinstance(value, _PYTHON_TYPES[expected]) and not (expected in ("integer", "number") and isinstance(value, bool))
    errors = [] if ok else [f"{where}: {type(value).__name__} where the CRD wants {expected}"]
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{where}: {value!r} is none of {node['enum']}")
    if "minimum" in node and ok and expected in ("integer", "number") and value < node["minimum"]:
        errors.append(f"{where}: {value} is below the minimum {node['minimum']}")
    return errors


def check(contract: dict[str, dict[str, Any]], document: Any, path: str = "") -> list[str]:
    """Every way the document leaves the CRD's fields, one line each ([] when none)."""
    node = contract.get(path)
    if node is None:
        return [f"{path}: not in dgd_crd_v1beta1.json; if the CRD has it, rebuild the file (test_graph_crd.py)"]
    errors = _type_errors(node, document, path)
    if isinstance(document, dict) and not node.get("any_key"):
        errors += [f"{path or '(top)'}: {name} is required" for name in node.get("required", []) if name not in document]
        for key, item in document.items():
            if key in node.get("fields", []):
                errors += check(contract, item, f"{path}.{key}".lstrip("."))
            elif node.get("map"):
                errors += check(contract, item, f"{path}.*".lstrip("."))
            else:
                errors.append(f"{path or '(top)'}: {key} is not a field of the CRD here")
    elif isinstance(document, list):
        for item in document:
            errors += check(contract, item, f"{path}[]")
    return errors
