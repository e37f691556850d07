"""The REST API handlers, one module per domain."""
