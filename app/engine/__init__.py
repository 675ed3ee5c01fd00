"""A replica's vLLM engine: built for its role from the config, warmed up, bound to its
cores, and its model source."""
