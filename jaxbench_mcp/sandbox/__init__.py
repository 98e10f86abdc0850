"""The sandbox wall: the parent's side (isolation, jobs, protocol) and the inside (worker, tpu_facade)."""
