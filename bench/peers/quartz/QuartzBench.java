import java.io.FileInputStream;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.quartz.Job;
import org.quartz.JobBuilder;
import org.quartz.JobDetail;
import org.quartz.JobExecutionContext;
import org.quartz.Scheduler;
import org.quartz.SimpleScheduleBuilder;
import org.quartz.Trigger;
import org.quartz.TriggerBuilder;
import org.quartz.impl.StdSchedulerFactory;

/**
 * The Quartz side of the comparison.
 *
 * <pre>
 * QuartzBench load PROPERTIES JDBC_URL JOBS LEAD_MS
 *     Schedules JOBS no-op jobs, each with a SimpleTrigger repeating every second forever, their
 *     start times spread evenly over one second. They are stored a day ahead, then moved in one
 *     UPDATE so that the first is due LEAD_MS from now; prints that time (epoch ms).
 * QuartzBench node PROPERTIES JDBC_URL STOP_AT_MS RECORDS
 *     Runs one clustered scheduler until STOP_AT_MS, shuts it down waiting for running jobs,
 *     and writes one line per execution to RECORDS: job, scheduled fire time, fire time, end.
 * </pre>
 */
public final class QuartzBench {
    private static final long DAY_MS = 86_400_000L;

    public static void main(String[] args) throws Exception {
        if (args.length == 5 && args[0].equals("load")) {
            load(properties(args[1], args[2]), args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]));
        } else if (args.length == 5 && args[0].equals("node")) {
            node(properties(args[1], args[2]), Long.parseLong(args[3]), args[4]);
        } else {
            System.err.println("usage: QuartzBench load PROPERTIES JDBC_URL JOBS LEAD_MS"
                    + " | node PROPERTIES JDBC_URL STOP_AT_MS RECORDS");
            System.exit(2);
        }
    }

    static Properties properties(String file, String url) throws IOException {
        Properties p = new Properties();
        try (FileInputStream in = new FileInputStream(file)) {
            p.load(in);
        }
        p.setProperty("org.quartz.dataSource.bench.URL", url);
        return p;
    }

    static void load(Properties props, String url, int jobs, long leadMs) throws Exception {
        // Not started: only used to store the jobs through Quartz's own API.
        Scheduler scheduler = new StdSchedulerFactory(props).getScheduler();
        long base = System.currentTimeMillis() + DAY_MS;
        int chunk = 2_000;
        for (int from = 0; from < jobs; from += chunk) {
            Map<JobDetail, Set<? extends Trigger>> batch = new LinkedHashMap<>();
            for (int i = from; i < Math.min(jobs, from + chunk); i++) {
                JobDetail job = JobBuilder.newJob(NoopJob.class).withIdentity("j" + i).build();
                Trigger trigger = TriggerBuilder.newTrigger()
                        .withIdentity("t" + i)
                        .startAt(new java.util.Date(base + i * 1000L / jobs))
                        .withSchedule(SimpleScheduleBuilder.repeatSecondlyForever(1))
                        .build();
                batch.put(job, Collections.singleton(trigger));
            }
            scheduler.scheduleJobs(batch, true);
        }
        scheduler.shutdown();
        long first = System.currentTimeMillis() + leadMs;
        try (Connection c = DriverManager.getConnection(url, "postgres", "");
                PreparedStatement shift = c.prepareStatement(
                        "UPDATE qrtz_triggers SET start_time = start_time - ?, next_fire_time = next_fire_time - ?")) {
            shift.setLong(1, base - first);
            shift.setLong(2, base - first);
            int moved = shift.executeUpdate();
            if (moved != jobs) {
                throw new IllegalStateException("moved " + moved + " triggers, expected " + jobs);
            }
        }
        System.out.println(first);
    }

    static void node(Properties props, long stopAt, String records) throws Exception {
        Scheduler scheduler = new StdSchedulerFactory(props).getScheduler();
        scheduler.start();
        System.err.println("quartz node " + scheduler.getSchedulerInstanceId() + " started");
        long left;
        while ((left = stopAt - System.currentTimeMillis()) > 0) {
            Thread.sleep(Math.min(left, 1000));
        }
        scheduler.shutdown(true);
        int n = Recorder.write(records);
        System.err.println("quartz node " + scheduler.getSchedulerInstanceId() + " stopped: " + n + " executions");
    }

    /** The no-op job: records when it was due, when Quartz fired it, and when it ended. */
    public static final class NoopJob implements Job {
        @Override
        public void execute(JobExecutionContext ctx) {
            int job = Integer.parseInt(ctx.getTrigger().getKey().getName().substring(1));
            Recorder.add(job, ctx.getScheduledFireTime().getTime(), ctx.getFireTime().getTime(),
                    System.currentTimeMillis());
        }
    }

    static final class Recorder {
        private static int n;
        private static int[] job = new int[1 << 16];
        private static long[] due = new long[1 << 16];
        private static long[] fired = new long[1 << 16];
        private static long[] end = new long[1 << 16];

        static synchronized void add(int j, long d, long f, long e) {
            if (n == job.length) {
                job = Arrays.copyOf(job, n * 2);
                due = Arrays.copyOf(due, n * 2);
                fired = Arrays.copyOf(fired, n * 2);
                end = Arrays.copyOf(end, n * 2);
            }
            job[n] = j;
            due[n] = d;
            fired[n] = f;
            end[n] = e;
            n++;
        }

        static synchronized int write(String path) throws IOException {
            try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Paths.get(path)))) {
                for (int i = 0; i < n; i++) {
                    out.print(job[i]);
                    out.print(' ');
                    out.print(due[i]);
                    out.print(' ');
                    out.print(fired[i]);
                    out.print(' ');
                    out.println(end[i]);
                }
            }
            return n;
        }
    }
}
