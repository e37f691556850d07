"""JupyterHub spawners of KPL Lab: profiles, project quotas in the platform ledger, devices."""
