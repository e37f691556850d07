"""Experiments: jobs compared side by side, and hyperparameter searches whose trials are jobs."""
