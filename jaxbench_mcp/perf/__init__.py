"""Performance: the cost model, static estimates, profiling, tuning and timed runs."""
