"""The REST handlers where HTTP itself matters: a job's live log and events, and predictions."""
