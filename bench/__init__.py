"""Offline memory-recall benchmark: dataset conversion, a BM25 baseline and metrics.

Run as ``python -m bench ...``. The bot never imports this package.
"""
