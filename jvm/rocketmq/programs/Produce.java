import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

import java.nio.charset.StandardCharsets;

/**
 * Sends COUNT messages synchronously with RocketMQ's own DefaultMQProducer; the broker is found
 * only through the NameServer given. Args: namesrvAddr topic count [group]. Prints "SENT n".
 */
public class Produce {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(args.length > 3 ? args[3] : "produce-group");
        producer.setNamesrvAddr(args[0]);
        producer.setSendMsgTimeout(10000);
        producer.setRetryTimesWhenSendFailed(5);
        producer.start();
        int count = Integer.parseInt(args[2]);
        int ok = 0;
        try {
            for (int i = 0; i < count; i++) {
                Message msg = new Message(args[1], "TagA", ("message-" + i).getBytes(StandardCharsets.UTF_8));
                SendResult result = producer.send(msg);
                if (result.getSendStatus() == SendStatus.SEND_OK) {
                    ok++;
                } else {
                    System.out.println("status " + result.getSendStatus());
                }
            }
        } finally {
            producer.shutdown();
        }
        System.out.println("SENT " + ok);
        System.exit(ok == count ? 0 : 1);
    }
}
