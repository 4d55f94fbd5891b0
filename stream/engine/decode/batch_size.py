"""How many rows an Arrow batch the engine makes holds at most: one number for scans, change
reads and the Python API's readers.

Memory follows it (a reader holds a few batches at a time), and Arrow's kernels run at
full speed well below it. A module of its own so that what plans without reading (a
stream's driver, the change feed) can name it without loading the decoders.
"""

DEFAULT_BATCH_SIZE = 131_072
