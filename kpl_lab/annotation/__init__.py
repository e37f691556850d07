"""Annotation: labelling tasks on dataset versions, labels saved with a version check and a history,
review, queues (ordered by the uncertainty of stored suggestions), publishing as a dataset version,
export and import. Pre-labelling runs that write suggestions are not built yet (docs/annotation.md).

Every operation is a function of plain arguments (the platform, the project, the caller's name
and whether they administer it) that answers a model of `kpl_lab.api.annotation`; the REST
handlers and the in-process client call the same functions.
"""
