"""Pretraining: the run configuration, the loop, LAMB/AdamW, precision and Horovod.

The only package that imports Horovod (distributed.py).
"""
