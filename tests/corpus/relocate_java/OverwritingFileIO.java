package meltwater.relocate;

import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.PositionOutputStream;

/**
 * HadoopFileIO whose create() overwrites, for the staging writes of rewrite_table_path.
 *
 * <p>Iceberg 1.10's RewriteTablePathSparkAction collects the position delete files to rewrite
 * into a Set of DeleteFile objects that do not compare equal by location, so a delete file
 * reached through more than one ref (a table with a branch or tag) is rewritten twice and the
 * second create() fails with FileAlreadyExistsException (apache/iceberg#14814, fixed upstream
 * by deduplicating, PR #14859). Both writes produce the same bytes from the same input, so
 * letting the second one overwrite gives the output the fixed action gives. Only the
 * procedure's staging directory is ever written through this FileIO.
 */
public class OverwritingFileIO extends HadoopFileIO {
  public OverwritingFileIO() {
    super();
  }

  @Override
  public OutputFile newOutputFile(String path) {
    OutputFile delegate = super.newOutputFile(path);
    return new OutputFile() {
      @Override
      public PositionOutputStream create() {
        return delegate.createOrOverwrite();
      }

      @Override
      public PositionOutputStream createOrOverwrite() {
        return delegate.createOrOverwrite();
      }

      @Override
      public String location() {
        return delegate.location();
      }

      @Override
      public InputFile toInputFile() {
        return delegate.toInputFile();
      }
    };
  }
}
