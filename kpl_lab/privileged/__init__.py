"""The privileged helper: the one root process of `kpl-lab up`, with a narrow command set.

Everything else (the hub, its proxy, the platform service, the gateway, job and replica
supervisors) runs as the platform's system account (`kpl`). What truly needs root goes
through the helper (`helper.py`), on a Unix socket only that account reaches: create users'
accounts and project groups, give a folder to its user, take a staged folder back, start a
process as a user in her projects' groups under its limits, signal a user's processes as
that user, remove a process's cgroups. Every argument is checked (`rules.py`); nothing it
is asked to start runs as root. `client.py` is the platform's side.

Standard library and this package's light modules only: it starts fast and is easy to audit.
"""
