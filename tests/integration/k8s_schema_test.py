#!/usr/bin/python3
"""deploy.k8s_schema: every document of deploy/kubernetes/*.yaml validated offline against
Kubernetes' own API schemas, two of them, each strict (a field the API does not have is an
error, as `kubeconform -strict` and the API server's strict field validation make it):

1. Kubernetes' OpenAPI (swagger 2.0) spec of v1.14.0, which Debian's golang-k8s-kube-openapi-dev
   ships as test data (k8s.io/kube-openapi/test/integration/testdata/aggregator/openapi.json),
   read as JSON Schema (draft 4) by python3-jsonschema the way kubeconform's schemas are made
   from it (openapi2jsonschema): the definition named by each document's apiVersion and kind
   (x-kubernetes-group-version-kind), `additionalProperties: false` on every object with
   properties, IntOrString as a string or an integer, Quantity as a string or a number (the API
   takes both).
2. The API models of Kubernetes 1.22 in Debian's python3-kubernetes 22.6 (generated from that
   release's OpenAPI spec): every field one the model has (attribute_map), of the model's type
   (openapi_types), and every required field there (the models' own checks, by building them).

Before the manifests, each validator must refuse three broken copies of the scheduler's
StatefulSet (an unknown field, a wrong type, a required field missing): a validator that
refuses nothing proves nothing. Exit 0 when all pass, 1 on an error, 77 (skipped, the reason
printed) where a schema source or python3-jsonschema/yaml is missing.

    /usr/bin/python3 tests/integration/k8s_schema_test.py [MANIFEST_DIR]
"""
import copy
import json
import os
import re
import sys

SWAGGER = ("/usr/share/gocode/src/k8s.io/kube-openapi/test/integration/testdata/aggregator/"
           "openapi.json")
HERE = os.path.dirname(os.path.abspath(__file__))
MANIFESTS = os.path.join(HERE, "..", "..", "deploy", "kubernetes")


def skip(why):
    print("k8s_schema_test: skipped: " + why)
    sys.exit(77)


try:
    import yaml
except ImportError:
    skip("no PyYAML (Debian package python3-yaml)")
try:
    import jsonschema
except ImportError:
    skip("no jsonschema (Debian package python3-jsonschema)")
try:
    import kubernetes.client as k8s_models
except ImportError:
    skip("no Kubernetes API models (Debian package python3-kubernetes)")
if not os.path.exists(SWAGGER):
    skip("no Kubernetes OpenAPI spec at %s (Debian package golang-k8s-kube-openapi-dev)" % SWAGGER)


# --- 1. The OpenAPI spec as JSON Schema ------------------------------------------------------

def strict(node):
    """The swagger schema `node` as kubeconform's strict JSON Schema."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if out.get("format") == "int-or-string":
        out.pop("type", None)
        out["type"] = ["string", "integer"]
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


class OpenAPI:
    def __init__(self, path):
        with open(path) as f:
            spec = json.load(f)
        self.version = spec["info"]["version"]
        defs = {name: strict(d) for name, d in spec["definitions"].items()}
        defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] = ["string", "number"]
        self.defs = defs
        self.by_gvk = {}
        for name, d in spec["definitions"].items():
            for gvk in d.get("x-kubernetes-group-version-kind", []):
                self.by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name

    def errors(self, doc):
        api = str(doc.get("apiVersion", ""))
        group, _, version = api.rpartition("/")
        name = self.by_gvk.get((group, version, doc.get("kind")))
        if name is None:
            return name, ["no kind %s in %s's API" % (doc.get("kind"), api)]
        schema = {"$ref": "#/definitions/" + name, "definitions": self.defs}
        v = jsonschema.Draft4Validator(schema)
        return name, ["%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(root)", e.message)
                      for e in v.iter_errors(doc)]


# --- 2. The API models -----------------------------------------------------------------------

def model_errors(value, typ, path, out):
    """What in `value` the model type `typ` (an openapi_types string) does not allow."""
    where = path or "(root)"
    m = re.fullmatch(r"list\[(.*)\]", typ)
    if m:
        if not isinstance(value, list):
            return out.append("%s: %r is not a list" % (where, value))
        for i, v in enumerate(value):
            model_errors(v, m.group(1), "%s/%d" % (path, i), out)
        return
    m = re.fullmatch(r"dict\(str, (.*)\)", typ)
    if m:
        if not isinstance(value, dict):
            return out.append("%s: %r is not a map" % (where, value))
        for k, v in value.items():
            model_errors(v, m.group(1), "%s/%s" % (path, k), out)
        return
    simple = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}
    if typ in simple:
        ok = isinstance(value, simple[typ]) and not (typ in ("int", "float") and
                                                     isinstance(value, bool))
        if not ok:
            out.append("%s: %r is not %s" % (where, value, typ))
        return
    if typ == "object":  # IntOrString and free-form values
        return
    cls = getattr(k8s_models, typ)
    if not isinstance(value, dict):
        return out.append("%s: %r is not a %s" % (where, value, typ))
    by_json = {j: attr for attr, j in cls.attribute_map.items()}
    for k, v in value.items():
        if k not in by_json:
            out.append("%s: unknown field %r (%s has %s)" % (where, k, typ,
                                                              ", ".join(sorted(by_json))))
        else:
            model_errors(v, cls.openapi_types[by_json[k]], "%s/%s" % (path, k), out)


def models_errors(doc):
    api = str(doc.get("apiVersion", ""))
    version = api.rpartition("/")[2]
    name = version[0].upper() + version[1:] + str(doc.get("kind"))
    if not hasattr(k8s_models, name):
        return name, ["no model %s for %s %s" % (name, api, doc.get("kind"))]
    out = []
    model_errors(doc, name, "", out)
    if not out:  # required fields and enums: the models' own checks as they are built
        try:
            k8s_models.ApiClient()._ApiClient__deserialize(doc, name)
        except (ValueError, TypeError) as e:
            out.append(str(e))
    return name, out


# --- The test --------------------------------------------------------------------------------

def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else MANIFESTS
    openapi = OpenAPI(SWAGGER)
    validators = [
        ("Kubernetes %s OpenAPI" % openapi.version, openapi.errors),
        ("Kubernetes 1.22 models (python3-kubernetes %s)" % k8s_models.__version__
         if hasattr(k8s_models, "__version__") else "Kubernetes models", models_errors),
    ]
    docs = []
    for f in sorted(os.listdir(directory)):
        if f.endswith(".yaml"):
            with open(os.path.join(directory, f)) as fh:
                docs += [(f, d) for d in yaml.safe_load_all(fh) if d]
    passed = failed = 0

    def check(ok, text):
        nonlocal passed, failed
        print(("ok: " if ok else "FAILED: ") + text)
        if ok:
            passed += 1
        else:
            failed += 1

    # The validators refuse what the API refuses.
    sts = next((d for _, d in docs if d.get("kind") == "StatefulSet"), None)
    check(sts is not None, "a StatefulSet to break")
    if sts is not None:
        unknown = copy.deepcopy(sts)
        unknown["spec"]["template"]["spec"]["containers"][0]["portz"] = []
        wrong = copy.deepcopy(sts)
        wrong["spec"]["replicas"] = "one"
        missing = copy.deepcopy(sts)
        del missing["spec"]["template"]["spec"]["containers"][0]["name"]
        for label, validate in validators:
            for what, broken in (("an unknown field", unknown), ("a wrong type", wrong),
                                 ("a missing required field", missing)):
                _, errs = validate(broken)
                check(bool(errs), "%s refuses %s: %s" % (label, what, errs[:1]))

    # The manifests.
    for f, d in docs:
        what = "%s %s/%s (%s)" % (d.get("kind"), d.get("metadata", {}).get("namespace", "-"),
                                  d.get("metadata", {}).get("name"), f)
        for label, validate in validators:
            schema, errs = validate(d)
            check(not errs, "%s valid against %s %s%s" % (what, label, schema,
                                                         "".join("\n  " + e for e in errs)))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
