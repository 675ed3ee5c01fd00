"""Load generators and benchmarks; each module is runnable with `python -m load_tests.<name>`."""
