"""The REST API's request and response bodies as pydantic models, one module per domain.

These modules import only pydantic and the standard library, so magics and widgets may
import them without the ORM. `kpl_lab.catalog.serialize` builds them from database rows;
`kpl_lab.server_ext.openapi` writes docs/openapi.yaml from them and the routes table.
"""
