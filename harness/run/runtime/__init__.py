"""Where a run executes: in-process, or inside a locked container image."""
