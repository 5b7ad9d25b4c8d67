import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Receives with RocketMQ's own DefaultMQPushConsumer until EXPECTED distinct bodies arrived.
 * Args: namesrvAddr topic expected timeoutSeconds [group]. Prints "RECEIVED n"; exit 1 on timeout.
 */
public class Consume {
    public static void main(String[] args) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args.length > 4 ? args[4] : "consume-group");
        consumer.setNamesrvAddr(args[0]);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.setHeartbeatBrokerInterval(1000);
        consumer.subscribe(args[1], "*");
        Set<String> seen = ConcurrentHashMap.newKeySet();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                seen.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        int expected = Integer.parseInt(args[2]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000;
        while (seen.size() < expected && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        consumer.shutdown();
        System.out.println("RECEIVED " + seen.size());
        System.exit(seen.size() >= expected ? 0 : 1);
    }
}
