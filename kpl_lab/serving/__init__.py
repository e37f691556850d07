"""Deployments: models served over HTTP by supervised replicas behind the platform's gateway (docs/serving.md)."""
