"""dbt's artifacts read as plain data: the manifest's nodes, selection, the parents of a node,
a run's results. Pure: no file is opened and nothing of engage-sync is imported, so the CLI,
the status server and `plan` call it alike and its unit tests need no I/O."""
