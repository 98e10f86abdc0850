"""Where checks run: this host (executors) or a Ray fleet (ray_executor)."""
