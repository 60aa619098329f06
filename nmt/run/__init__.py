"""A training run: its whole life (lifecycle.py), its folder's layout (folder.py), its lock (lock.py) and its
metrics log (log.py)."""
