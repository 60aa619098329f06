"""A training run: its life, folder, lock and metrics log."""
