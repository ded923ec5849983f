/*
 * A tiny command-line harness around Kafka's own Java clients (kafka-clients), used by the interop
 * tests (tests/kafka) to talk to a real broker on loopback. Compiled by interop/fetch_kafka.sh.
 *
 *   create-topic BOOTSTRAP TOPIC PARTITIONS [KEY=VALUE ...]
 *       Creates the topic (replication factor 1) with the given topic configs; prints "created".
 *   alter-topic-config BOOTSTRAP TOPIC KEY=VALUE ...
 *       Sets topic configs (incremental SET); prints "altered".
 *   produce BOOTSTRAP TOPIC PARTITION
 *       Reads records from stdin, one a line: CODEC \t KEY \t VALUE [\t HEADERS]
 *       CODEC: none|gzip|snappy|lz4|zstd (one idempotent producer a codec; the previous
 *       producer is flushed whenever the codec changes, so records land in input order);
 *       KEY and VALUE: base64, or "-" for null (a null value is a tombstone);
 *       HEADERS: comma-separated NAME=BASE64 (or NAME=- for a null header value).
 *       Prints the offset the broker assigned to each record, one a line, in input order.
 *   produce-transactions BOOTSTRAP TOPIC PARTITION CODEC
 *       One transactional producer (transactional.id "interop-<topic>") reads stdin lines
 *       TXN \t OUTCOME \t KEY \t VALUE: consecutive lines with the same TXN number form one
 *       transaction, committed or aborted (OUTCOME commit|abort) after its last record. Prints
 *       the offset of each record, one a line, in input order.
 *   consume BOOTSTRAP TOPIC PARTITION [read_uncommitted|read_committed]
 *       Reads the partition from its start to its end offset (no consumer group). Prints a line
 *       "#range START END", then one line a record:
 *       OFFSET \t KEY \t VALUE \t HEADERS \t TIMESTAMP (the same encodings as produce).
 *
 * Every failure exits non-zero with the exception on stderr.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaClientHarness {
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final Base64.Decoder UNB64 = Base64.getDecoder();

    private KafkaClientHarness() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: create-topic|alter-topic-config|produce|consume BOOTSTRAP TOPIC ...");
            System.exit(2);
        }
        switch (args[0]) {
            case "create-topic" -> createTopic(args[1], args[2], Integer.parseInt(args[3]), args);
            case "alter-topic-config" -> alterTopicConfig(args[1], args[2], args);
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]));
            case "produce-transactions" -> produceTransactions(args[1], args[2], Integer.parseInt(args[3]), args[4]);
            case "consume" -> consume(args[1], args[2], Integer.parseInt(args[3]),
                    args.length > 4 ? args[4] : "read_uncommitted");
            default -> {
                System.err.println("unknown command " + args[0]);
                System.exit(2);
            }
        }
    }

    private static void createTopic(String bootstrap, String topic, int partitions, String[] args) throws Exception {
        Map<String, String> configs = new HashMap<>();
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            configs.put(kv[0], kv[1]);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            NewTopic nt = new NewTopic(topic, partitions, (short) 1).configs(configs);
            admin.createTopics(Collections.singleton(nt)).all().get();
        }
        System.out.println("created");
    }

    private static void alterTopicConfig(String bootstrap, String topic, String[] args) throws Exception {
        List<AlterConfigOp> ops = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
        }
        System.out.println("altered");
    }

    private static byte[] decode(String field) {
        return "-".equals(field) ? null : UNB64.decode(field);
    }

    private static String encode(byte[] data) {
        return data == null ? "-" : B64.encodeToString(data);
    }

    private static List<Header> parseHeaders(String field) {
        List<Header> headers = new ArrayList<>();
        if (field == null || field.isEmpty()) {
            return headers;
        }
        for (String item : field.split(",")) {
            String[] kv = item.split("=", 2);
            headers.add(new RecordHeader(kv[0], decode(kv[1])));
        }
        return headers;
    }

    private static String formatHeaders(Iterable<Header> headers) {
        StringBuilder sb = new StringBuilder();
        for (Header h : headers) {
            if (sb.length() > 0) {
                sb.append(',');
            }
            sb.append(h.key()).append('=').append(encode(h.value()));
        }
        return sb.toString();
    }

    private static KafkaProducer<byte[], byte[]> newProducer(String bootstrap, String codec) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "32768");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(props);
    }

    private static void produce(String bootstrap, String topic, int partition) throws Exception {
        Map<String, KafkaProducer<byte[], byte[]>> producers = new LinkedHashMap<>();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        String current = null;
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] f = line.split("\t", -1);
                String codec = f[0];
                if (current != null && !current.equals(codec)) {
                    producers.get(current).flush();
                }
                current = codec;
                KafkaProducer<byte[], byte[]> producer =
                        producers.computeIfAbsent(codec, c -> newProducer(bootstrap, c));
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, partition, null,
                        decode(f[1]), decode(f[2]), parseHeaders(f.length > 3 ? f[3] : ""));
                sent.add(producer.send(record));
            }
            for (KafkaProducer<byte[], byte[]> p : producers.values()) {
                p.flush();
            }
            StringBuilder out = new StringBuilder();
            for (Future<RecordMetadata> f : sent) {
                out.append(f.get().offset()).append('\n');
            }
            System.out.print(out);
        } finally {
            for (KafkaProducer<byte[], byte[]> p : producers.values()) {
                p.close(Duration.ofSeconds(30));
            }
        }
    }

    private static void produceTransactions(String bootstrap, String topic, int partition, String codec)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "interop-" + topic);
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            producer.initTransactions();
            String txn = null;
            String outcome = null;
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] f = line.split("\t", -1);
                if (!f[0].equals(txn)) {
                    endTransaction(producer, outcome);
                    producer.beginTransaction();
                    txn = f[0];
                }
                outcome = f[1];
                sent.add(producer.send(new ProducerRecord<>(topic, partition, decode(f[2]), decode(f[3]))));
            }
            endTransaction(producer, outcome);
        }
        StringBuilder out = new StringBuilder();
        for (Future<RecordMetadata> f : sent) {
            out.append(f.get().offset()).append('\n');
        }
        System.out.print(out);
    }

    private static void endTransaction(KafkaProducer<byte[], byte[]> producer, String outcome) {
        if (outcome == null) {
            return;
        }
        if ("commit".equals(outcome)) {
            producer.commitTransaction();
        } else {
            producer.flush();  // the records reach the log before the abort marker
            producer.abortTransaction();
        }
    }

    private static void consume(String bootstrap, String topic, int partition, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(topic, partition);
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(Collections.singleton(tp));
            long start = consumer.beginningOffsets(Collections.singleton(tp)).get(tp);
            long end = consumer.endOffsets(Collections.singleton(tp)).get(tp);
            out.append("#range ").append(start).append(' ').append(end).append('\n');
            consumer.seek(tp, start);
            long deadline = System.currentTimeMillis() + 120_000;
            while (consumer.position(tp) < end) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("timed out at position " + consumer.position(tp) + " of " + end);
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    out.append(r.offset()).append('\t').append(encode(r.key())).append('\t')
                            .append(encode(r.value())).append('\t').append(formatHeaders(r.headers()))
                            .append('\t').append(r.timestamp()).append('\n');
                }
            }
        }
        System.out.print(out);
    }
}
