"""How a sweep is scheduled: the grid's points merged into compiled ensembles and cut into tasks, their runs
written as they finish and resumed (``schedule``), on this process or a Dask cluster (``executors``)."""
