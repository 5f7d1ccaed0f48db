#!/usr/bin/env python3
"""Runs checkov on infra/template.yaml and holds its findings to infra/checkov-accepted.json:
a finding not accepted there fails, and so does an accepted one that no longer occurs (so the
list stays true). Usage: infra/check.py path/to/checkov"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


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
    sys.exit(1 if new or stale else 0)


if __name__ == "__main__":
    main()
