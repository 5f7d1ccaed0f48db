#!/usr/bin/env python3
"""After `sam deploy`: publishes the web UI to the stack's web bucket, writes `.env.aws-<stage>`
(the stack's resources, for `spool admin --backend aws` and `spool serve --backend aws`), and says
what to do next. Usage: infra/publish.py <stack name> <stage> [web dir]. Needs boto3 (the SAM
CLI's venv has it) and AWS credentials, as `sam deploy` did."""

import mimetypes
import os
import sys

import boto3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from outputs import OUTPUTS  # noqa: E402 - the one list of the stack's outputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def outputs(cloudformation, stack):
    """The stack's outputs by key; exits with what to do when there is no such stack."""
    try:
        described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    except cloudformation.exceptions.ClientError as e:
        sys.exit(f"publish: cannot read stack {stack}: {e}. Run `make deploy` first, with the same STAGE.")
    return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


def publish_web(s3, bucket, web_dir):
    """Uploads every file of `web_dir`; browsers revalidate them (their names carry no hash).
    Returns how many files were uploaded."""
    if not os.path.isfile(os.path.join(web_dir, "index.html")):
        sys.exit(f"publish: {web_dir} has no index.html: run `make web` first")
    count = 0
    for folder, _, files in os.walk(web_dir):
        for name in files:
            path = os.path.join(folder, name)
            key = os.path.relpath(path, web_dir).replace(os.sep, "/")
            content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
            with open(path, "rb") as f:
                s3.put_object(Bucket=bucket, Key=key, Body=f.read(), ContentType=content_type,
                              CacheControl="no-cache")
            count += 1
    return count


def env_file(found, region):
    """The `.env.aws-<stage>` text for the stack's outputs."""
    lines = ["# Written by `make deploy` (infra/publish.py): the deployed stack's resources.",
             "SPOOL_BACKEND=aws", f"AWS_REGION={region}"]
    lines += [f"{var}={found[key]}" for key, var in OUTPUTS.items() if key in found]
    return "\n".join(lines) + "\n"


def run(stack, stage, web_dir, out_dir, session=None):
    """Publishes `web_dir` to `stack`'s web bucket and writes `out_dir/.env.aws-<stage>`;
    returns the stack's outputs."""
    session = session or boto3.session.Session()
    found = outputs(session.client("cloudformation"), stack)
    if "WebBucketName" not in found:
        sys.exit(f"publish: stack {stack} has no web bucket (was it deployed with DeployFunctions=false?)")
    print(f"publish: uploading {web_dir} to s3://{found['WebBucketName']} …", flush=True)
    count = publish_web(session.client("s3"), found["WebBucketName"], web_dir)
    print(f"publish: {count} files published")
    env_path = os.path.join(out_dir, f".env.aws-{stage}")
    with open(env_path, "w") as f:
        f.write(env_file(found, session.region_name))
    print(f"publish: wrote {env_path}")
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    stack, stage = sys.argv[1], sys.argv[2]
    web_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "web", "dist")
    found = run(stack, stage, web_dir, ROOT)
    print(f"""
Spool is deployed: {found.get('WebUrl')}
Dashboard: {found.get('DashboardUrl')}

Next, make the first organization and its API key (the key is shown once):
  cargo build --release -p spool-local
  ./target/release/spool admin create-org "My team" --backend aws --env-file .env.aws-{stage}
  ./target/release/spool admin create-api-key <org_id from above> --backend aws --env-file .env.aws-{stage}
Then open {found.get('WebUrl')} and sign in with the key. Model providers' keys go in the
secret spool-{stage}-provider-keys (docs/RUNBOOK.md, "Change a model provider's key").""")


if __name__ == "__main__":
    main()
