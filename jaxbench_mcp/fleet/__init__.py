"""Where checks run: this host (executors) or a Ray fleet (ray_executor, with its proxy process, host actors,
placement and typed messages)."""
