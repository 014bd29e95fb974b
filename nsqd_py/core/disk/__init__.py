"""Durability: the disk queues behind topics and channels, and what an OK to a publisher means (acks.py)."""
