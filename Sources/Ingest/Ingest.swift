// Ingest
