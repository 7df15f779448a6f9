"""What each command of ``attnflow`` does: the command line itself (``cli``), ``hist`` and ``fit`` on a model's
token states, ``plot`` redrawing a run's figures, and ``validate``'s table of theory checks."""
