"""Load while things go wrong: streams with disconnects (``soak``), replicas and engines
killed and a rolling redeploy against the oracle (``chaos_soak``), a decode replica killed
on a timer (``fault_soak``, ``migration_bench``), cold start and overload (``overload``),
a burst at once (``burst``), and priority classes under overload (``priority_bench``)."""
