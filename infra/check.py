#!/usr/bin/env python3
"""Runs checkov on infra/template.yaml and holds its findings to infra/checkov-accepted.json:
a finding not accepted there fails, and so does an accepted one that no longer occurs (so the
list stays true). Then checks what checkov does not: no function's environment holds a secret
(secrets are read by ARN at cold start), and the CloudFront Function that sends a stream's
writes to the API is the one in infra/edge/ and does so (run in Node with a stand-in for its
`cloudfront` module). Usage: infra/check.py path/to/checkov"""

import json
import os
import re
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


class Loader(yaml.SafeLoader):
    """Reads CloudFormation's short-form tags (!Ref, !Sub, …) as their plain values."""


Loader.add_multi_constructor("!", lambda loader, suffix, node: (
    loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode)
    else loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode)
    else loader.construct_mapping(node)))

SECRET_NAME = re.compile(r"SECRET|API_KEY|PASSWORD|TOKEN", re.IGNORECASE)


def secrets_in_environments():
    """Each (resource, variable) whose environment holds a secret: a secret-like name (one that
    names ARNs is fine) or a dynamic reference that resolves into the environment."""
    with open(os.path.join(HERE, "template.yaml")) as f:
        template = yaml.load(f, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    environments = [("Globals", template.get("Globals", {}).get("Function", {}).get("Environment", {}))]
    for name, resource in template["Resources"].items():
        environments.append((name, resource.get("Properties", {}).get("Environment", {})))
    found = []
    for name, environment in environments:
        for var, value in (environment or {}).get("Variables", {}).items():
            named = SECRET_NAME.search(var) and not var.endswith(("_ARN", "_ARNS"))
            if named or "{{resolve:" in str(value):
                found.append((name, var))
    return found


NODE_CHECK = r"""
import { handler } from './stream-writes.mjs';
const cases = [['GET', null], ['HEAD', null], ['OPTIONS', null], ['POST', 'api'], ['PUT', 'api'], ['DELETE', 'api'], ['PATCH', 'api']];
let failed = 0;
for (const [method, origin] of cases) {
  globalThis.__selected = null;
  const request = { method, uri: '/v1/stream/a/b', headers: { host: { value: 'd.example' } } };
  const out = handler({ request });
  if (out !== request || globalThis.__selected !== origin || request.headers['x-forwarded-host']) {
    console.log(`${method}: origin ${globalThis.__selected}, expected ${origin}`);
    failed++;
  }
}
// The subscription section goes to the API, reads too, naming the viewer's host.
for (const method of ['GET', 'PUT', 'POST', 'DELETE']) {
  globalThis.__selected = null;
  const request = { method, uri: '/v1/stream/__ds/subscriptions/s', headers: { host: { value: 'd.example' } } };
  handler({ request });
  if (globalThis.__selected !== 'api' || request.headers['x-forwarded-host']?.value !== 'd.example') {
    console.log(`${method} __ds: origin ${globalThis.__selected}, x-forwarded-host ${JSON.stringify(request.headers['x-forwarded-host'])}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
"""


def stream_writes_function():
    """Problems with the CloudFront Function: not the file's code, or not routing as it says."""
    import tempfile
    with open(os.path.join(HERE, "template.yaml")) as f:
        template = yaml.load(f, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    with open(os.path.join(HERE, "edge", "stream-writes.js")) as f:
        code = f.read()
    inline = template["Resources"]["StreamWritesFunction"]["Properties"]["FunctionCode"]
    if inline.strip() != code.strip():
        return ["the template's StreamWritesFunction is not infra/edge/stream-writes.js: copy the file into it"]
    with tempfile.TemporaryDirectory() as tmp:
        module = code.replace("import cf from 'cloudfront';",
                              "const cf = { selectRequestOriginById: (id) => { globalThis.__selected = id; } };")
        with open(os.path.join(tmp, "stream-writes.mjs"), "w") as f:
            f.write(module + "\nexport { handler };\n")
        with open(os.path.join(tmp, "check.mjs"), "w") as f:
            f.write(NODE_CHECK)
        run = subprocess.run(["node", "check.mjs"], cwd=tmp, capture_output=True, text=True)
    if run.returncode != 0:
        return [f"infra/edge/stream-writes.js routes wrongly: {run.stdout}{run.stderr}"]
    return []


def dashboard_problems():
    """The dashboard's body must be JSON once CloudFormation substitutes its ${…} names."""
    import re
    with open(os.path.join(HERE, "template.yaml")) as f:
        template = yaml.load(f, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    body = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"][0]
    try:
        widgets = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))["widgets"]
    except (json.JSONDecodeError, KeyError) as e:
        return [f"the dashboard's body is not JSON with widgets: {e}"]
    return [] if widgets else ["the dashboard has no widgets"]


def main():
    checkov = sys.argv[1] if len(sys.argv) > 1 else "checkov"
    run = subprocess.run(
        [checkov, "-f", os.path.join(HERE, "template.yaml"), "--framework", "cloudformation", "--quiet", "-o", "json"],
        capture_output=True, text=True,
    )
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        sys.exit(f"checkov gave no report:\n{run.stdout}\n{run.stderr}")
    failed = {(f["check_id"], f["resource"]) for f in report["results"]["failed_checks"]}
    passed = report.get("summary", {}).get("passed", 0)
    with open(os.path.join(HERE, "checkov-accepted.json")) as f:
        accepted = {(a["check"], r) for a in json.load(f)["accepted"] for r in a["resources"]}
    new = sorted(failed - accepted)
    stale = sorted(accepted - failed)
    for check, resource in new:
        print(f"checkov: NEW finding {check} on {resource}: fix it, or accept it with a reason in infra/checkov-accepted.json")
    for check, resource in stale:
        print(f"checkov: {check} on {resource} passes now: remove it from infra/checkov-accepted.json")
    print(f"checkov: {passed} checks passed, {len(failed)} findings, all accepted with a reason" if not new and not stale
          else f"checkov: {len(new)} new findings, {len(stale)} stale acceptances")
    leaks = secrets_in_environments()
    for resource, var in leaks:
        print(f"template: {resource} puts {var} in a function's environment: read it by ARN from Secrets Manager (SPOOL_SECRET_ARNS)")
    if not leaks:
        print("template: no function's environment holds a secret")
    edge = stream_writes_function()
    for problem in edge:
        print(f"template: {problem}")
    if not edge:
        print("template: the CloudFront Function sends a stream's writes and its __ds section to the API origin and its reads to the stream function")
    board = dashboard_problems()
    for problem in board:
        print(f"template: {problem}")
    sys.exit(1 if new or stale or leaks or edge or board else 0)


if __name__ == "__main__":
    main()
