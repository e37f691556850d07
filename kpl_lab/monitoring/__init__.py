"""Operations: what the people who run the platform watch (metrics, alerts, audit log, logs, usage history).

Both hosts of the platform (the hub's service, a single-user Jupyter server) run one
`Monitor` step in their background rounds (`kpl_lab.rounds`): it samples the machine and
the catalog into a `Snapshot`, which the Prometheus exposition (`metrics`), the alert rules
(`alerts`), the usage history (`history`) and the admin page all read; nothing else polls.
"""
