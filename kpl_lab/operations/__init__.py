"""The REST API's operations as plain Python functions: one module per domain, one routes table.

Each operation of `routes.ROUTES` names the function that performs it,
`(caller, **path and query arguments, body) -> answer model | Raw`, where `caller`
(`caller.Caller`) says who asks, in which project, on which platform. The functions build
each answer in one place and raise `kpl_lab.errors`; nothing here imports tornado or
jupyter_server. Two transports run them: the REST handlers of both hosts
(`kpl_lab.server_ext`), and `local.LocalTransport`, which runs them in-process for a
`kpl_lab.client.Client` on a home (the `kpl-lab` command without a server). `dispatch`
reads the arguments and bodies the table declares, once, for both.
"""
