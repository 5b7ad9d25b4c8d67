import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.EnumSet;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * What Spark's checkpoint does to a local directory (args: the directory, then "ours" or
 * "hadoop"): a file written through a temporary file and renamed over an older one with
 * FileContext, a file written and chmod-ed with FileSystem, a symbolic link's status.
 * Prints what it found; the test runs it with no PATH, so any forked process fails it.
 */
public class LocalFsCheck {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    if (args[1].equals("ours")) {
      conf.set("fs.file.impl", "namesrv.hadoop.NioLocalFileSystem");
      conf.set("fs.AbstractFileSystem.file.impl", "namesrv.hadoop.NioLocalFs");
    }
    Path dir = new Path("file://" + args[0]);
    FileContext fc = FileContext.getFileContext(dir.toUri(), conf);
    Path dst = new Path(dir, "1");
    for (String text : new String[] {"first", "second"}) {
      Path tmp = new Path(dir, "." + text + ".tmp");
      try (FSDataOutputStream out = fc.create(tmp, EnumSet.of(CreateFlag.CREATE, CreateFlag.OVERWRITE))) {
        out.write(text.getBytes(StandardCharsets.UTF_8));
      }
      fc.rename(tmp, dst, Options.Rename.OVERWRITE);
    }
    FileSystem fs = FileSystem.get(dir.toUri(), conf);
    Path other = new Path(dir, "2");
    try (FSDataOutputStream out = fs.create(other, true)) {
      out.write(1);
    }
    fs.setPermission(other, new FsPermission((short) 0640));
    Files.createSymbolicLink(Paths.get(args[0], "link"), Paths.get(args[0], "1"));
    FileStatus link = fc.getFileLinkStatus(new Path(dir, "link"));
    FileStatus plain = fc.getFileLinkStatus(dst);
    System.out.println("filesystem " + fs.getClass().getName());
    System.out.println("content " + new String(Files.readAllBytes(Paths.get(args[0], "1")), StandardCharsets.UTF_8));
    System.out.println("link " + link.isSymlink() + " " + link.getLen() + " " + link.isFile());
    System.out.println("plain " + plain.isSymlink() + " " + plain.getLen());
  }
}
