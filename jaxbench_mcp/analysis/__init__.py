"""What a traced program holds: kernels, replay, coverage, program size."""
