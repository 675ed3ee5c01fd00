"""Benchmarks, by the question each answers (docs/load_tests.md has the table and the
`make bench-*` target of each): ``serving``, ``kv``, ``reliability`` and ``planning`` hold
the benchmarks a user runs (``python -m load_tests.<package>.<name>``); ``client`` and
``systems`` what they are built from (the client side, the systems under test), which the
tests import too; ``reports`` turns result files into tables and plots."""
