// Kafka's ProducerPerformance run more than once in one JVM (bench_kafka_perf.py --warm-tool).
//
// Usage: java -cp <Kafka's jars> bench/WarmProducerPerformance.java PASSES <ProducerPerformance's arguments>
//
// Each pass is the tool's own run (ProducerPerformance.start: a new producer, the same records and
// the same final line), one after another in this JVM: the passes before the last warm its JIT,
// and the last pass's final line is the measured one. ProducerPerformance.main makes one instance
// and calls start; start is not public, so it is called by reflection (both on the classpath).
import java.lang.reflect.Method;
import java.util.Arrays;

public class WarmProducerPerformance {
    public static void main(String[] args) throws Exception {
        int passes = Integer.parseInt(args[0]);
        String[] toolArgs = Arrays.copyOfRange(args, 1, args.length);
        Class<?> tool = Class.forName("org.apache.kafka.tools.ProducerPerformance");
        Method start = tool.getDeclaredMethod("start", String[].class);
        start.setAccessible(true);
        for (int pass = 1; pass <= passes; pass++) {
            System.out.println("WarmProducerPerformance: pass " + pass + " of " + passes);
            start.invoke(tool.getDeclaredConstructor().newInstance(), (Object) toolArgs);
        }
    }
}
