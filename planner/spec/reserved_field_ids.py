"""The spec's "Reserved Field IDs": the field ids of metadata columns, never a table's own.

A table's fields must not use ids above 2147483447 (Integer.MAX_VALUE - 200): that range
is kept for columns readers and writers add beside the table's, so a file column or a
change row column with one of these ids means the same thing in every table. Meltwater
reads the position delete files' columns by these ids, writes them on the change metadata
columns it returns, and reads or derives v3 row lineage by them.
"""

from __future__ import annotations

FILE_ID = 2147483646  # `_file`: the path of the file a row is stored in
ROW_POSITION_ID = 2147483645  # `_pos`: the row's position in that file, from 0
IS_DELETED_ID = 2147483644  # `_deleted`: whether the row has been deleted
SPEC_ID_ID = 2147483643  # `_spec_id`: the partition spec of the row's file
PARTITION_ID = 2147483642  # `_partition`: the row's partition tuple

# The columns of position delete files.
DELETE_FILE_PATH_ID = 2147483546  # `file_path`: the data file a deleted row is in
DELETE_POS_ID = 2147483545  # `pos`: the deleted row's position in that file
DELETE_ROW_ID = 2147483544  # `row`: the deleted row's values, when the writer kept them

# The metadata columns of change rows (Iceberg's changelog).
CHANGE_TYPE_ID = 2147483543  # `_change_type`: INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER
CHANGE_ORDINAL_ID = 2147483542  # `_change_ordinal`: the order of the change's commit
COMMIT_SNAPSHOT_ID_ID = 2147483541  # `_commit_snapshot_id`: the snapshot that changed the row

# v3 row lineage.
ROW_ID_ID = 2147483540  # `_row_id`: a row's unique id in the table
LAST_UPDATED_SEQUENCE_NUMBER_ID = 2147483539  # `_last_updated_sequence_number`
