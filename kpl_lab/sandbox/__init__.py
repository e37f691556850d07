"""Sandboxed workers: where the platform parses and runs what members supplied.

Model files' structure, pipeline validation (DuckDB parsing member SQL) and pipeline runs
(queries, regular expressions, annotation parsers), archive imports and image thumbnails
run in worker processes of the project (`worker.py`), never in the platform's own: with
the privileged helper as the project's sandbox account (its only group: the project's),
otherwise as the platform's account in a process of their own. Each worker has a memory
limit (its cgroup, or the fallback's RLIMIT_DATA) and each call a time limit; a worker that
runs past either, or whose call is stopped, is killed and the call fails saying why. The
platform (`pool.py`) keeps a few idle workers per project, so a call costs a round trip, not
an interpreter's start.
"""
