package meltwater.corpus.s3;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * An {@code s3://} Hadoop FileSystem whose buckets are local directories: {@code
 * s3://<bucket>/<key>} is the file {@code <root>/<bucket>/<key>}, where {@code <root>} is the
 * Hadoop property {@value #ROOT}.
 *
 * <p>Why: the corpus writer (Iceberg Java on Spark) has no S3 client, and the corpus must be
 * written by Iceberg Java itself at {@code s3://} locations, not relocated afterwards. Registered
 * as {@code fs.s3.impl}, this lets Iceberg's Hadoop catalog and {@code HadoopFileIO} run
 * unchanged with an {@code s3://} warehouse: every location they write into metadata, manifest
 * lists, manifests and delete files is a string they build from the warehouse URI, so it says
 * {@code s3://}; this class only decides where the bytes land, and the bucket directory can be
 * uploaded to a real object store byte for byte under the same keys.
 *
 * <p>Iceberg never sees a local path: every {@link FileStatus} this class returns (directly,
 * or inside a listing) carries the {@code s3://} path that was asked for, never the local
 * file's. Statuses are plain {@code FileStatus} objects with default permissions, as S3A's are:
 * RawLocalFileSystem's own statuses load permissions lazily from their path, which is no local
 * path here. Bytes are read and written by RawLocalFileSystem itself (no checksum files), and
 * a commit's rename is a local rename, as for the corpus's {@code file:} warehouse.
 */
public class LocalBucketFileSystem extends RawLocalFileSystem {
  /** Hadoop property: the local directory holding one subdirectory per bucket. */
  public static final String ROOT = "fs.s3.local-bucket.root";

  private URI uri;
  private File bucketDir;

  @Override
  public String getScheme() {
    return "s3";
  }

  @Override
  public URI getUri() {
    return uri;
  }

  /** Unqualified "/": the superclass constructor asks before {@link #uri} is known. */
  @Override
  protected Path getInitialWorkingDirectory() {
    return new Path("/");
  }

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    String bucket = name.getAuthority();
    if (bucket == null || bucket.isEmpty()) {
      throw new IOException("no bucket in " + name);
    }
    String root = conf.get(ROOT);
    if (root == null || root.isEmpty()) {
      throw new IOException(ROOT + " is not set: where should s3://" + bucket + " be stored?");
    }
    uri = URI.create(name.getScheme() + "://" + bucket);
    bucketDir = new File(root, bucket).getAbsoluteFile();
    if (!bucketDir.isDirectory() && !bucketDir.mkdirs()) {
      throw new IOException("cannot create " + bucketDir);
    }
    super.initialize(uri, conf);
    setWorkingDirectory(new Path(uri + "/"));
  }

  /** {@code s3://<bucket>/<key>} (or a bare {@code /<key>}) to {@code <root>/<bucket>/<key>}. */
  @Override
  public File pathToFile(Path path) {
    checkPath(path);
    if (!path.isAbsolute()) {
      path = new Path(getWorkingDirectory(), path);
    }
    return new File(bucketDir, path.toUri().getPath());
  }

  @Override
  public FileStatus getFileStatus(Path path) throws IOException {
    File file = pathToFile(path);
    if (!file.exists()) {
      throw new FileNotFoundException("File " + path + " does not exist");
    }
    boolean dir = file.isDirectory();
    return new FileStatus(
        dir ? 0 : file.length(),
        dir,
        1,
        getDefaultBlockSize(path),
        file.lastModified(),
        file.lastModified(),
        dir ? FsPermission.getDirDefault() : FsPermission.getFileDefault(),
        System.getProperty("user.name"),
        System.getProperty("user.name"),
        makeQualified(path));
  }

  /** No symlinks in a bucket: a link status is the plain status. */
  @Override
  public FileStatus getFileLinkStatus(Path path) throws IOException {
    return getFileStatus(path);
  }

  @Override
  public boolean supportsSymlinks() {
    return false;
  }

  @Override
  public FileStatus[] listStatus(Path path) throws IOException {
    File file = pathToFile(path);
    if (!file.exists()) {
      throw new FileNotFoundException("File " + path + " does not exist");
    }
    if (!file.isDirectory()) {
      return new FileStatus[] {getFileStatus(path)};
    }
    String[] names = file.list();
    if (names == null) {
      throw new IOException("cannot list " + path);
    }
    List<FileStatus> statuses = new ArrayList<>(names.length);
    for (String name : names) {
      try {
        statuses.add(getFileStatus(new Path(path, new Path(null, null, name))));
      } catch (FileNotFoundException gone) {
        // deleted since it was listed, as RawLocalFileSystem tolerates too
      }
    }
    return statuses.toArray(new FileStatus[0]);
  }

  @Override
  public Path getHomeDirectory() {
    return makeQualified(new Path("/user/" + System.getProperty("user.name")));
  }

  @Override
  public String toString() {
    return "LocalBucketFileSystem[" + uri + " -> " + bucketDir + "]";
  }
}
