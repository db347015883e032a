"""Text -> WordPiece -> TFRecords in Google's schema, and TFRecords -> batches.

Knows nothing of the model: the TFRecord schema (records.py) is the one contract with training.
"""
