import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Closed-loop load generator for GET_ROUTEINFO_BY_TOPIC (code 105) over RocketMQ's remoting
 * protocol: N connections, one request in flight on each, JSON headers exactly as a 5.3.3 Java
 * client writes them. The same program measures any NameServer address, so two servers are
 * compared with the same client.
 *
 * Args: host:port topicsCommaSeparated connections warmupSeconds seconds [pauseMicros]
 * (pauseMicros: each connection waits this long after an answer, to pace the load below saturation).
 * Prints one JSON line: requests, errors (non-SUCCESS answers), seconds, rps, p50/p99/p999 in us.
 */
public class RouteLoad {
    public static void main(String[] args) throws Exception {
        String[] hp = args[0].split(":");
        String[] topics = args[1].split(",");
        int connections = Integer.parseInt(args[2]);
        double warmup = Double.parseDouble(args[3]);
        double seconds = Double.parseDouble(args[4]);
        long pauseNanos = args.length > 5 ? Long.parseLong(args[5]) * 1000 : 0;
        AtomicBoolean measuring = new AtomicBoolean(false);
        AtomicBoolean stop = new AtomicBoolean(false);
        long[][] lat = new long[connections][];
        int[] counts = new int[connections];
        long[] errors = new long[connections];
        CountDownLatch done = new CountDownLatch(connections);
        for (int c = 0; c < connections; c++) {
            final int id = c;
            Thread t = new Thread(() -> {
                long[] mine = new long[1 << 16];
                int n = 0;
                try (Socket s = new Socket()) {
                    s.setTcpNoDelay(true);
                    s.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
                    s.setSoTimeout(10000);
                    DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                    DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                    int opaque = id * 10_000_000;
                    int i = id;
                    while (!stop.get()) {
                        String topic = topics[i++ % topics.length];
                        byte[] header = ("{\"code\":105,\"extFields\":{\"topic\":\"" + topic + "\"},\"flag\":0,"
                            + "\"language\":\"JAVA\",\"opaque\":" + (opaque++) + ",\"serializeTypeCurrentRPC\":\"JSON\","
                            + "\"version\":479}").getBytes(StandardCharsets.UTF_8);
                        long t0 = System.nanoTime();
                        out.writeInt(4 + header.length);
                        out.writeInt(header.length);
                        out.write(header);
                        out.flush();
                        int len = in.readInt();
                        int mark = in.readInt();
                        int hlen = mark & 0xFFFFFF;
                        byte[] h = new byte[hlen];
                        in.readFully(h);
                        in.skipNBytes(len - 4 - hlen);
                        long micros = (System.nanoTime() - t0) / 1000;
                        if (measuring.get()) {
                            if (!new String(h, 0, Math.min(hlen, 12), StandardCharsets.UTF_8).startsWith("{\"code\":0,")) {
                                errors[id]++;
                            }
                            if (n == mine.length) {
                                mine = Arrays.copyOf(mine, n * 2);
                            }
                            mine[n++] = micros;
                        }
                        if (pauseNanos > 0) {
                            java.util.concurrent.locks.LockSupport.parkNanos(pauseNanos);
                        }
                    }
                } catch (Exception e) {
                    if (!stop.get()) {
                        System.err.println("connection " + id + ": " + e);
                        errors[id]++;
                    }
                } finally {
                    lat[id] = mine;
                    counts[id] = n;
                    done.countDown();
                }
            });
            t.setDaemon(true);
            t.start();
        }
        Thread.sleep((long) (warmup * 1000));
        measuring.set(true);
        long start = System.nanoTime();
        Thread.sleep((long) (seconds * 1000));
        measuring.set(false);
        double elapsed = (System.nanoTime() - start) / 1e9;
        stop.set(true);
        done.await();
        int total = 0;
        long errs = 0;
        for (int c = 0; c < connections; c++) {
            total += counts[c];
            errs += errors[c];
        }
        long[] all = new long[total];
        int k = 0;
        for (int c = 0; c < connections; c++) {
            System.arraycopy(lat[c], 0, all, k, counts[c]);
            k += counts[c];
        }
        Arrays.sort(all);
        System.out.printf("{\"requests\":%d,\"errors\":%d,\"seconds\":%.3f,\"rps\":%.1f,\"p50_us\":%d,\"p99_us\":%d,\"p999_us\":%d}%n",
            total, errs, elapsed, total / elapsed, pct(all, 0.50), pct(all, 0.99), pct(all, 0.999));
    }

    static long pct(long[] sorted, double q) {
        if (sorted.length == 0) {
            return -1;
        }
        return sorted[Math.min(sorted.length - 1, (int) Math.floor(q * sorted.length))];
    }
}
