"""How a configuration runs: its field (``fields``), what it computes and in which compiled calls (``plan``),
the memory it needs (``memory``), the checks it passes before anything runs (``preflight``), and the particle
ensemble that produces its ``RunResult`` (``runner``); and ``af.probe``, a model's token states measured
layer by layer into a ``ProbeResult`` (``probe_run``)."""
