#!/usr/bin/env python3
"""Strict offline validation of Kubernetes manifests, for deploy/kubernetes.

    validate.py [-k VERSION]... [--crd CRD.yaml]... FILE|-

Every document of FILE (a `kubectl kustomize` rendering; `-` for stdin) is checked against a
schema, strictly: a field the schema does not name is an error, not something to ignore.

- Built-in kinds: kubernetes-validate's strict schemas, for every Kubernetes version given with
  -k (default: the newest it ships).
- Custom resources (ServiceMonitor, PrometheusRule, ...): the openAPIV3Schema of the
  CustomResourceDefinition given with --crd for their group, version and kind. An API server
  *prunes* the fields a structural CRD schema does not name; strict here means they fail
  instead: every object schema that lists properties, has no additionalProperties and does not
  say x-kubernetes-preserve-unknown-fields gets additionalProperties: false. Their metadata is
  checked against the strict ObjectMeta of each Kubernetes version. CEL rules
  (x-kubernetes-validations) cannot be evaluated here: a schema that has them is reported.

A document of a kind with no schema (no built-in one, no CRD given) is an error: nothing is
skipped. On success the documents are printed on stdout as one JSON array (for callers that
want to read the rendering without a YAML parser of their own), and the exit status is 0; on
failure each problem is one line on stderr, and the exit status is 1.
"""

import argparse
import copy
import json
import os
import sys

import jsonschema
import kubernetes_validate.utils as kv
import referencing
import yaml

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def strict_crd_schema(node):
    """The CRD schema `node` (a copy), translated to JSON Schema and made strict."""
    if isinstance(node, list):
        return [strict_crd_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict_crd_schema(value) for key, value in node.items()}
    if out.get("nullable") is True and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if out.get("x-kubernetes-int-or-string") is True and "type" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and out.get("x-kubernetes-preserve-unknown-fields") is not True
    ):
        out["additionalProperties"] = False
    return out


def uses_cel(node):
    if isinstance(node, dict):
        return "x-kubernetes-validations" in node or any(uses_cel(v) for v in node.values())
    if isinstance(node, list):
        return any(uses_cel(v) for v in node)
    return False


def load_crds(paths):
    """{(apiVersion, kind): (schema, CRD file)} for every served version of every CRD given."""
    schemas = {}
    for path in paths:
        with open(path) as f:
            for crd in yaml.safe_load_all(f):
                if not crd:
                    continue
                if crd.get("kind") != "CustomResourceDefinition":
                    raise SystemExit(f"{path}: not a CustomResourceDefinition: {crd.get('kind')}")
                spec = crd["spec"]
                for version in spec["versions"]:
                    if not version.get("served", True):
                        continue
                    raw = version["schema"]["openAPIV3Schema"]
                    if uses_cel(raw):
                        print(
                            f"validate.py: note: {path} ({version['name']}) has CEL rules "
                            "(x-kubernetes-validations), which are not evaluated here",
                            file=sys.stderr,
                        )
                    api_version = f"{spec['group']}/{version['name']}"
                    schemas[(api_version, spec["names"]["kind"])] = (
                        strict_crd_schema(raw),
                        os.path.basename(path),
                    )
    return schemas


def crd_errors(doc, schema, k8s_version):
    """Errors of a custom resource against its strict CRD schema, its metadata against the
    strict ObjectMeta of `k8s_version`."""
    version = [v for v in kv.all_versions() if kv.major_minor(v) <= k8s_version][-1]
    definitions = kv.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", k8s_version
    )
    schema = copy.deepcopy(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("properties", {})["metadata"] = {
        "$ref": f"{definitions['$id']}#/$defs/{OBJECT_META}"
    }
    for required in ("apiVersion", "kind", "metadata"):
        if required not in schema.setdefault("required", []):
            schema["required"].append(required)
    registry = referencing.Resource.from_contents(definitions) @ referencing.Registry()
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]


def builtin_errors(doc, k8s_version):
    try:
        kv.validate(doc, k8s_version, strict=True)
    except kv.ValidationError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return [f"{where}: {error.message}"]
    except kv.SchemaNotFoundError as error:
        return [f"{error.message}; for a custom resource, give its CRD with --crd"]
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", "--kubernetes-version", action="append", dest="versions")
    parser.add_argument("--crd", action="append", default=[], help="a CRD YAML file")
    parser.add_argument("file", help="YAML documents, or - for stdin")
    args = parser.parse_args()
    versions = args.versions or [kv.latest_version()]
    known = [kv.major_minor(v) for v in kv.all_versions()]
    for version in versions:
        if kv.major_minor(version) not in known:
            raise SystemExit(
                f"validate.py: no schemas for Kubernetes {version} in this kubernetes-validate "
                f"(it has {', '.join(known)})"
            )
    crds = load_crds(args.crd)

    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    problems = []
    if not docs:
        problems.append(f"{args.file}: no documents")
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            problems.append(f"{args.file}: a document without apiVersion and kind: {doc!r:.80}")
            continue
        name = f"{doc['kind']}/{(doc.get('metadata') or {}).get('name', '?')}"
        crd = crds.get((doc["apiVersion"], doc["kind"]))
        for version in versions:
            if crd:
                errors = crd_errors(doc, crd[0], version)
                source = f"CRD {crd[1]}, ObjectMeta of Kubernetes {version}"
            else:
                errors = builtin_errors(doc, version)
                source = f"Kubernetes {version}, strict"
            problems += [f"{name} ({source}): {e}" for e in errors]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    json.dump(docs, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
