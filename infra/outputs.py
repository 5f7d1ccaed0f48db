"""The stack's outputs that name Spool's resources, and the variables Spool reads them from:
one list for the emulator (localstack/emulator.py writes .env.emulator) and for a deployment
(infra/publish.py writes .env.aws-<stage>)."""

OUTPUTS = {
    "StreamsTableName": "SPOOL_STREAMS_TABLE",
    "MetadataTableName": "SPOOL_METADATA_TABLE",
    "PagesBucketName": "SPOOL_PAGES_BUCKET",
    "AttachmentsBucketName": "SPOOL_ATTACHMENTS_BUCKET",
    "TurnsQueueUrl": "SPOOL_TURNS_QUEUE_URL",
    "MaintenanceQueueUrl": "SPOOL_MAINTENANCE_QUEUE_URL",
    "AggregatesQueueUrl": "SPOOL_AGGREGATES_QUEUE_URL",
}
