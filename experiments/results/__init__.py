"""How results are written and read: run directories written atomically and owned file by file (``store``), the one refusal of an output
path (``target``),
read back by one reader (``rundir``) and as an ``xarray.Dataset`` (``dataset``, ``af.load``); what a particle run
writes and its report (``runs``); the figures of a run (``figures``)."""
