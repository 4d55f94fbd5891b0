package meltwater.corpus;

import java.nio.ByteBuffer;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.GenericAppenderFactory;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.InternalRecordWrapper;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.deletes.BaseDVFileWriter;
import org.apache.iceberg.deletes.EqualityDeleteWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.TypeUtil;
import org.apache.iceberg.types.Types;

/**
 * Writes data and delete files with Iceberg's own generic writers for the test corpus.
 *
 * <p>Spark SQL never writes equality deletes nor position deletes that carry the deleted row, so
 * the corpus writes those through this class (driven from Python over py4j). The class exists
 * because py4j turns every boxed number into a Python int and back into an Integer: values are
 * converted to the column's Iceberg type here, on the Java side.
 */
public final class CorpusFiles {
  private static long taskId = 0;

  private CorpusFiles() {}

  /** One data file holding {@code rows}, all of which must fall into the same partition. */
  public static DataFile writeData(Table table, List<Map<String, Object>> rows) throws Exception {
    Schema schema = table.schema();
    PartitionSpec spec = table.spec();
    List<Record> records = toRecords(schema, rows);
    StructLike partition = partitionOf(spec, schema, records.get(0));
    GenericAppenderFactory factory = new GenericAppenderFactory(schema, spec);
    EncryptedOutputFile out = outputFile(table, spec, partition);
    DataWriter<Record> writer = factory.newDataWriter(out, FileFormat.PARQUET, partition);
    try {
      for (Record record : records) {
        writer.write(record);
      }
    } finally {
      writer.close();
    }
    return writer.toDataFile();
  }

  /**
   * An equality delete file on {@code columns}. With {@code fullRow} the file stores every
   * column of the table (as CDC writers do for retractions), otherwise only the key columns.
   * {@code specId} selects the spec the file is written with: an unpartitioned spec makes it a
   * global delete; otherwise the partition is taken from the first row.
   */
  public static DeleteFile writeEqualityDeletes(
      Table table, List<String> columns, boolean fullRow, int specId, List<Map<String, Object>> rows)
      throws Exception {
    Schema schema = table.schema();
    PartitionSpec spec = table.specs().get(specId);
    int[] ids = new int[columns.size()];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = schema.findField(columns.get(i)).fieldId();
    }
    Schema deleteSchema = fullRow ? schema : TypeUtil.select(schema, toSet(ids));
    List<Record> records = toRecords(deleteSchema, rows);
    StructLike partition =
        spec.isUnpartitioned() ? null : partitionOf(spec, schema, toRecords(schema, rows).get(0));
    GenericAppenderFactory factory =
        new GenericAppenderFactory(schema, spec, ids, deleteSchema, null);
    EncryptedOutputFile out = outputFile(table, spec, partition);
    EqualityDeleteWriter<Record> writer =
        factory.newEqDeleteWriter(out, FileFormat.PARQUET, partition);
    try {
      for (Record record : records) {
        writer.write(record);
      }
    } finally {
      writer.close();
    }
    return writer.toDeleteFile();
  }

  /**
   * A position delete file. Each delete is a map with {@code file_path}, {@code pos} and, when
   * {@code withRow} is set, {@code row}: the deleted row's values, stored in the file's row
   * column. Deletes must already be sorted by file and position, as the spec requires.
   */
  public static DeleteFile writePositionDeletes(
      Table table, boolean withRow, int specId, Map<String, Object> partitionRow,
      List<Map<String, Object>> deletes) throws Exception {
    Schema schema = table.schema();
    PartitionSpec spec = table.specs().get(specId);
    StructLike partition = partitionOfRow(spec, schema, partitionRow);
    GenericAppenderFactory factory =
        new GenericAppenderFactory(schema, spec, null, null, withRow ? schema : null);
    EncryptedOutputFile out = outputFile(table, spec, partition);
    PositionDeleteWriter<Record> writer =
        factory.newPosDeleteWriter(out, FileFormat.PARQUET, partition);
    try {
      PositionDelete<Record> delete = PositionDelete.create();
      for (Map<String, Object> entry : deletes) {
        Record row = null;
        if (withRow) {
          @SuppressWarnings("unchecked")
          Map<String, Object> values = (Map<String, Object>) entry.get("row");
          row = toRecords(schema, List.of(values)).get(0);
        }
        long pos = ((Number) entry.get("pos")).longValue();
        writer.write(delete.set((String) entry.get("file_path"), pos, row));
      }
    } finally {
      writer.close();
    }
    return writer.toDeleteFile();
  }

  /**
   * Deletion vectors (format v3) of the positions {@code deletes} name ({@code file_path},
   * {@code pos}), all of data files in the partition of {@code partitionRow} under spec {@code
   * specId}: one DV per data file, all in one Puffin file, as Iceberg's own writers make them.
   * The data files must have no DV yet (the corpus never merges one into an existing DV).
   */
  public static List<DeleteFile> writeDeletionVectors(
      Table table, int specId, Map<String, Object> partitionRow, List<Map<String, Object>> deletes)
      throws Exception {
    Schema schema = table.schema();
    PartitionSpec spec = table.specs().get(specId);
    StructLike partition = partitionOfRow(spec, schema, partitionRow);
    OutputFileFactory files =
        OutputFileFactory.builderFor(table, 1, ++taskId).format(FileFormat.PUFFIN).build();
    BaseDVFileWriter writer = new BaseDVFileWriter(files, path -> null);
    try {
      for (Map<String, Object> entry : deletes) {
        long pos = ((Number) entry.get("pos")).longValue();
        writer.delete((String) entry.get("file_path"), pos, spec, partition);
      }
    } finally {
      writer.close();
    }
    return writer.result().deleteFiles();
  }

  private static java.util.Set<Integer> toSet(int[] ids) {
    java.util.Set<Integer> set = new java.util.HashSet<>();
    for (int id : ids) {
      set.add(id);
    }
    return set;
  }

  private static EncryptedOutputFile outputFile(
      Table table, PartitionSpec spec, StructLike partition) {
    OutputFileFactory files =
        OutputFileFactory.builderFor(table, 1, ++taskId).format(FileFormat.PARQUET).build();
    return partition == null ? files.newOutputFile() : files.newOutputFile(spec, partition);
  }

  /** The partition {@code row}'s values fall into; null for an unpartitioned spec. */
  private static StructLike partitionOfRow(
      PartitionSpec spec, Schema schema, Map<String, Object> row) {
    return spec.isUnpartitioned()
        ? null
        : partitionOf(spec, schema, toRecords(schema, List.of(row)).get(0));
  }

  private static StructLike partitionOf(PartitionSpec spec, Schema schema, Record record) {
    PartitionKey key = new PartitionKey(spec, schema);
    key.partition(new InternalRecordWrapper(schema.asStruct()).wrap(record));
    return key;
  }

  private static List<Record> toRecords(Schema schema, List<Map<String, Object>> rows) {
    List<Record> records = new ArrayList<>(rows.size());
    for (Map<String, Object> row : rows) {
      GenericRecord record = GenericRecord.create(schema);
      for (Types.NestedField field : schema.columns()) {
        if (row.containsKey(field.name())) {
          record.setField(field.name(), convert(field.type(), row.get(field.name())));
        }
      }
      records.add(record);
    }
    return records;
  }

  /** Python values (as py4j delivers them) to the Java classes Iceberg's generic writers take. */
  private static Object convert(Type type, Object value) {
    if (value == null) {
      return null;
    }
    switch (type.typeId()) {
      case INTEGER:
        return ((Number) value).intValue();
      case LONG:
        return ((Number) value).longValue();
      case FLOAT:
        return ((Number) value).floatValue();
      case DOUBLE:
        return ((Number) value).doubleValue();
      case DECIMAL:
        return new java.math.BigDecimal(value.toString());
      case DATE:
        return LocalDate.parse(value.toString());
      case TIMESTAMP:
        return ((Types.TimestampType) type).shouldAdjustToUTC()
            ? OffsetDateTime.parse(value.toString())
            : LocalDateTime.parse(value.toString());
      case BINARY:
        return ByteBuffer.wrap((byte[]) value);
      default:
        return value;
    }
  }
}
