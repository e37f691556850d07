"""The kernel side of KPL Lab: the REST client, the %kpl_* magics, the widgets and the experiment SDK.

Everything here talks to the platform over its REST API (`client.Client`) and imports
nothing of the server side (no SQLAlchemy, DuckDB, pyarrow, engine, catalog or CLI):
`tests/kpl_lab/notebook/test_imports.py` checks what importing each part loads. Besides
the standard library and the kernel's own packages (IPython, ipywidgets, anywidget), it
may import the modules both sides share: the API's pydantic bodies (`kpl_lab.api`), the
errors, the terminal text helpers, the command-line shorthands (`kpl_lab.arguments`), what
fits the project now (`kpl_lab.fit`, the spawn form's rule too), the
pipeline file model (`kpl_lab.pipelines`, not its submodules that validate and run) and
parameter.yml's overrides (`kpl_lab.algorithms.parameters`).

The documented import paths re-export it: `kpl_lab.client`, `kpl_lab.experiment`,
`kpl_lab.widgets`, and `%load_ext kpl_lab`.
"""
