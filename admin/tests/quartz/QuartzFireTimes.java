// Prints Quartz's own reading of cron expressions: for each expression (one per line of the
// cases file) in each zone, from each start instant, the next fire times in UTC, or the
// ParseException Quartz raises. One JSON object per line, read by admin/tests/quartz_cron.rs.
//
// Built and run by scripts/quartz-reference against Debian's libquartz2-java (Quartz 2.3.2).

import java.nio.file.Files;
import java.nio.file.Paths;
import java.text.ParseException;
import java.time.Instant;
import java.util.Date;
import java.util.List;
import java.util.TimeZone;
import org.quartz.CronExpression;

public class QuartzFireTimes {
    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        List<String> cases = Files.readAllLines(Paths.get(args[0]));
        String[] zones = args[1].split(",");
        String[] starts = args[2].split(",");
        int count = Integer.parseInt(args[3]);
        for (String line : cases) {
            String expr = line.trim();
            if (expr.isEmpty() || expr.startsWith("#")) continue;
            for (String zone : zones) {
                for (String start : starts) {
                    StringBuilder out = new StringBuilder("{\"expr\":" + json(expr) + ",\"zone\":"
                            + json(zone) + ",\"from\":" + json(start));
                    try {
                        CronExpression c = new CronExpression(expr);
                        c.setTimeZone(TimeZone.getTimeZone(zone));
                        out.append(",\"fires\":[");
                        Date t = Date.from(Instant.parse(start));
                        for (int i = 0; i < count; i++) {
                            t = c.getNextValidTimeAfter(t);
                            if (t == null) break;
                            if (i > 0) out.append(',');
                            out.append(json(t.toInstant().toString()));
                        }
                        out.append(']');
                    } catch (ParseException e) {
                        out.append(",\"error\":").append(json(String.valueOf(e.getMessage())));
                    }
                    System.out.println(out.append('}'));
                }
            }
        }
    }
}
