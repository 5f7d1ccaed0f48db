#!/bin/bash
# LocalStack init hook (READY stage): create Spool's resources from the one template.
set -euo pipefail
awslocal cloudformation deploy \
  --stack-name spool-local \
  --template-file /spool/infra/template.yaml \
  --parameter-overrides Stage=local DeployFunctions=false \
  --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND \
  --no-fail-on-empty-changeset
echo "spool-local stack deployed"
