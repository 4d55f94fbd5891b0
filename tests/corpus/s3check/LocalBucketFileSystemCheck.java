import java.io.FileNotFoundException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;

/**
 * Checks what the S3 corpus relies on in LocalBucketFileSystem, through Hadoop's FileSystem
 * API as Iceberg's Hadoop catalog and HadoopFileIO call it: s3://lake/K is ROOT/lake/K, and
 * every status, listing and glob answers with s3:// paths, never local ones.
 *
 * <p>Usage: java -cp HADOOP_JARS:FS_JAR LocalBucketFileSystemCheck.java ROOT. Exits non-zero
 * with the failed expectation. Run by tests/test_s3_corpus.py; lives outside s3writer/ so
 * that editing it does not regenerate the S3 corpus.
 */
public class LocalBucketFileSystemCheck {
  static void expect(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  static void write(FileSystem fs, Path path, String text) throws Exception {
    try (FSDataOutputStream out = fs.create(path, false)) {
      out.writeBytes(text);
    }
  }

  public static void main(String[] args) throws Exception {
    String root = args[0];
    Configuration conf = new Configuration();
    conf.set("fs.s3.impl", "meltwater.corpus.s3.LocalBucketFileSystem");
    conf.set("fs.s3.local-bucket.root", root);
    Path v1 = new Path("s3://lake/db/t/metadata/v1.metadata.json");
    FileSystem fs = v1.getFileSystem(conf);
    expect(fs.getUri().toString().equals("s3://lake"), "uri " + fs.getUri());

    write(fs, v1, "{}");
    expect(Files.readString(Paths.get(root, "lake/db/t/metadata/v1.metadata.json")).equals("{}"),
        "s3://lake/K is stored at ROOT/lake/K");

    // a Hadoop catalog commit: write a temp file, rename it to the next version
    Path temp = new Path("s3://lake/db/t/metadata/abc.metadata.json");
    write(fs, temp, "{\"v\": 2}");
    Path v2 = new Path("s3://lake/db/t/metadata/v2.metadata.json");
    expect(!fs.exists(v2) && fs.rename(temp, v2) && fs.exists(v2) && !fs.exists(temp), "rename");
    try {
      write(fs, v1, "again");
      expect(false, "create(overwrite=false) of an existing file must fail");
    } catch (FileAlreadyExistsException expected) {
      // as on any Hadoop file system
    }

    FileStatus status = fs.getFileStatus(v2);
    expect(status.getPath().equals(v2) && status.getLen() == 8 && status.isFile(),
        "status " + status);
    expect(fs.getFileStatus(new Path("s3://lake/db/t")).isDirectory(), "directory status");
    try {
      fs.getFileStatus(new Path("s3://lake/db/none"));
      expect(false, "status of a missing key must fail");
    } catch (FileNotFoundException expected) {
      // as on any Hadoop file system
    }

    List<String> listed = new ArrayList<>();
    for (FileStatus child : fs.listStatus(new Path("s3://lake/db/t/metadata"))) {
      listed.add(child.getPath().toString());
    }
    listed.sort(null);
    expect(listed.equals(List.of(v1.toString(), v2.toString())), "listing " + listed);
    FileStatus[] ofFile = fs.listStatus(v1);
    expect(ofFile.length == 1 && ofFile[0].getPath().equals(v1), "listing of a file");
    FileStatus[] globbed = fs.globStatus(new Path("s3://lake/db/*/metadata/v2*"));
    expect(globbed.length == 1 && globbed[0].getPath().equals(v2), "glob");
    RemoteIterator<org.apache.hadoop.fs.LocatedFileStatus> files =
        fs.listFiles(new Path("s3://lake/db"), true);
    int count = 0;
    while (files.hasNext()) {
      String path = files.next().getPath().toString();
      expect(path.startsWith("s3://lake/db/t/metadata/v"), "listFiles " + path);
      count++;
    }
    expect(count == 2, "listFiles count " + count);
    expect(fs.makeQualified(new Path("/db/t")).toString().equals("s3://lake/db/t"),
        "a bare key qualifies into the bucket");

    FileSystem other = new Path("s3://other/k").getFileSystem(conf);
    write(other, new Path("s3://other/k"), "x");
    expect(Files.exists(Paths.get(root, "other/k")), "each bucket is its own directory");

    expect(fs.delete(new Path("s3://lake/db/t"), true) && !fs.exists(v1), "recursive delete");
    System.out.println("ok");
  }
}
