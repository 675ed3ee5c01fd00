"""Tables and plots from result files: a comparison's PNGs (``plots``) and tables
(``compare_report``), a trace benchmark's conclusions (``trace_report``) and plots
(``trace_plots``)."""
