"""What the reliability benchmarks inject: faults, each logged with what it hit."""
