"""Benchmarks behind ``mrope bench <name>``: each module has ``add_arguments(parser)`` and ``run(args)``."""
