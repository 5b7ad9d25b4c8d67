import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * mqadmin (MQAdminStartup.main0, the code the mqadmin script runs) for many commands in one JVM:
 * reads one command per line on stdin (arguments separated by tabs), runs it, prints its output
 * (stderr folded into stdout, in order) and then a line "@@END@@". Saves a JVM start per command.
 */
public class AdminShell {
    public static void main(String[] args) throws Exception {
        System.setErr(new PrintStream(System.out, true, StandardCharsets.UTF_8));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isEmpty()) {
                MQAdminStartup.main0(line.split("\t"), null);
            }
            System.out.println("@@END@@");
            System.out.flush();
        }
    }
}
