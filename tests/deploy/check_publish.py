#!/usr/bin/env python3
"""`make test`: infra/publish.py, the last step of `make deploy`, against the emulator. A stack
with the deployed stack's outputs is created in the emulator (CloudFormation), then publish
uploads a built UI to its web bucket (content types, `Cache-Control: no-cache`) and writes the
env file that `spool admin --backend aws` reads, which must name the stack's resources. Run with
the SAM CLI's venv (boto3); reads the emulator's env file (SPOOL_EMULATOR_ENV or .env.emulator)."""

import json
import os
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "infra"))


def load_emulator_env():
    path = os.environ.get("SPOOL_EMULATOR_ENV") or os.path.join(ROOT, ".env.emulator")
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                os.environ.setdefault(key, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))


def main():
    load_emulator_env()
    import boto3
    import publish

    name = f"spool-publish-{uuid.uuid4().hex[:8]}"
    template = {
        "Resources": {"Web": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": f"{name}-web"}}},
        "Outputs": {
            "WebBucketName": {"Value": {"Ref": "Web"}},
            "WebUrl": {"Value": "https://d111.cloudfront.net"},
            "StreamsTableName": {"Value": f"{name}-streams"},
            "MetadataTableName": {"Value": f"{name}-metadata"},
            "TurnsQueueUrl": {"Value": "https://sqs.us-east-1.amazonaws.com/123456789012/turns.fifo"},
        },
    }
    session = boto3.session.Session()
    cloudformation = session.client("cloudformation")
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    cloudformation.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    with tempfile.TemporaryDirectory() as web, tempfile.TemporaryDirectory() as out:
        os.makedirs(os.path.join(web, "assets"))
        with open(os.path.join(web, "index.html"), "w") as f:
            f.write("<!doctype html><title>Spool</title>")
        with open(os.path.join(web, "assets", "app.js"), "w") as f:
            f.write("console.log('spool')")
        publish.run(name, "check", web, out, session)
        s3 = session.client("s3")
        problems = []
        for key, kind in [("index.html", "text/html"), ("assets/app.js", "javascript")]:
            head = s3.head_object(Bucket=f"{name}-web", Key=key)
            if kind not in head["ContentType"] or head.get("CacheControl") != "no-cache":
                problems.append(f"{key}: {head['ContentType']}, {head.get('CacheControl')}")
        with open(os.path.join(out, ".env.aws-check")) as f:
            env = dict(line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))
        expected = {"SPOOL_BACKEND": "aws", "SPOOL_STREAMS_TABLE": f"{name}-streams",
                    "SPOOL_METADATA_TABLE": f"{name}-metadata"}
        for key, value in expected.items():
            if env.get(key) != value:
                problems.append(f"{key}={env.get(key)} in the env file, expected {value}")
        if "SPOOL_TURNS_QUEUE_URL" not in env:
            problems.append("the env file has no SPOOL_TURNS_QUEUE_URL")
    cloudformation.delete_stack(StackName=name)
    for problem in problems:
        print(f"publish-check: {problem}")
    print("publish-check: " + ("FAILED" if problems else "the UI is published with its types and no-cache, and the env file names the stack's resources"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
