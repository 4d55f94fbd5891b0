package meltwater.live;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.types.Types;

/**
 * Records what Apache Iceberg Java reads at a snapshot, as JSON lines, for the live writer.
 *
 * <p>The live writer commits many small changes a second; reading each snapshot back through
 * Spark would cost a job per commit. Iceberg's generic reader applies position and equality
 * deletes the same way, in-process, in milliseconds. Values are written as JSON numbers,
 * booleans and strings (decimals, dates and timestamps as their ISO text), which the Python
 * side converts back with the table's schema.
 */
public final class LiveTable {
  private LiveTable() {}

  /** Writes the rows of {@code snapshotId} to {@code path} (atomically: temp file + rename). */
  public static long dump(Table table, long snapshotId, String path) throws IOException {
    Path target = Paths.get(path);
    Path temp = target.resolveSibling(target.getFileName() + ".tmp");
    long count = 0;
    Types.StructType struct = table.schemas().get(table.snapshot(snapshotId).schemaId()).asStruct();
    try (CloseableIterable<Record> rows =
            IcebergGenerics.read(table).useSnapshot(snapshotId).build();
        BufferedWriter out = Files.newBufferedWriter(temp, StandardCharsets.UTF_8)) {
      StringBuilder line = new StringBuilder();
      for (Record row : rows) {
        line.setLength(0);
        line.append('{');
        boolean first = true;
        for (Types.NestedField field : struct.fields()) {
          if (!first) {
            line.append(',');
          }
          first = false;
          quote(line, field.name());
          line.append(':');
          value(line, row.getField(field.name()));
        }
        line.append("}\n");
        out.write(line.toString());
        count++;
      }
    }
    Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    return count;
  }

  private static void value(StringBuilder line, Object value) {
    if (value == null) {
      line.append("null");
    } else if (value instanceof Boolean
        || value instanceof Integer
        || value instanceof Long
        || value instanceof Float
        || value instanceof Double) {
      line.append(value);
    } else if (value instanceof java.math.BigDecimal) {
      quote(line, ((java.math.BigDecimal) value).toPlainString());
    } else {
      quote(line, value.toString());
    }
  }

  private static void quote(StringBuilder line, String text) {
    line.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        line.append('\\').append(c);
      } else if (c < 0x20) {
        line.append(String.format("\\u%04x", (int) c));
      } else {
        line.append(c);
      }
    }
    line.append('"');
  }
}
