package namesrv.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a child process per file.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} sets a new
 * file's permissions by running {@code chmod} and looks for a symbolic link by running
 * {@code readlink}. Spark's checkpoint writes each offset log, commit log and state store delta
 * file through a temporary file, its checksum and a rename: about forty processes forked per
 * micro-batch, 4.7 ms and several milliseconds of CPU each. Java's own file API sets the
 * permissions, and a file's own status is the answer Hadoop's link check gives
 * (tests/pipeline/test_local_fs.py compares the two).
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  /** The permission bits as Java names them (bit i of the mode is BITS[i]). */
  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (1 << i)) != 0) {
        out.add(BITS[i]);
      }
    }
    return out;
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {  // not expressible through PosixFilePermission
      super.setPermission(p, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    // Hadoop's own, without its native library, answers with the status of what the path leads
    // to, never a link (a link to a file reads as that file): the same answer, without the
    // processes it runs for it. FileContext then never resolves a link, as with Hadoop's own.
    return getFileStatus(f);
  }
}
