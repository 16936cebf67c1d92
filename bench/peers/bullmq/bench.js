// The BullMQ side of the comparison. Node resolves 'bullmq' and 'ioredis' through NODE_PATH
// (the harness points it at the copy bench/peers/install made).
//
//   node bench.js worker PORT CONCURRENCY STOP_AT_MS RECORDS
//       A worker with a no-op processor until STOP_AT_MS; then closes (letting active jobs
//       finish) and writes one line per job to RECORDS: scheduler, due, started, completed.
//   node bench.js load PORT JOBS FIRST_MS
//       Upserts JOBS job schedulers, each every 1000 ms, the first due at FIRST_MS (epoch ms)
//       and the others spread evenly over the second after it.
//   node bench.js check PORT JOBS
//       After the stop: jobs the schedulers produced (their iteration counts) and jobs left in
//       the queue, to compare with the recorded runs.
'use strict';
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');
const fs = require('fs');

const QUEUE = 'bench';
const [mode, port, ...rest] = process.argv.slice(2);
const connection = () => new IORedis({ host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: null });

// A scheduler's jobs are named repeat:<scheduler id>:<due millis>: the due time it was made for.
function dueOf(jobId) {
  return Number(jobId.slice(jobId.lastIndexOf(':') + 1));
}

async function worker(concurrency, stopAt, records) {
  const started = new Map();
  const lines = [];
  const w = new Worker(
    QUEUE,
    async (job) => {
      started.set(job.id, Date.now());
    },
    { connection: connection(), concurrency },
  );
  w.on('completed', (job) => {
    const at = started.get(job.id);
    started.delete(job.id);
    lines.push(`${job.repeatJobKey} ${dueOf(job.id)} ${at} ${Date.now()}`);
  });
  w.on('error', (err) => console.error(`worker error: ${err.message}`));
  await w.waitUntilReady();
  console.error(`bullmq worker ${process.pid} ready`);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, stopAt - Date.now())));
  await w.close();
  for (const [id, at] of started) {
    lines.push(`${id.slice(id.indexOf(':') + 1, id.lastIndexOf(':'))} ${dueOf(id)} ${at} -`);
  }
  fs.writeFileSync(records, lines.length ? lines.join('\n') + '\n' : '');
  console.error(`bullmq worker ${process.pid} stopped: ${lines.length} jobs started`);
}

async function load(jobs, first) {
  const queue = new Queue(QUEUE, { connection: connection() });
  const chunk = 1000;
  for (let from = 0; from < jobs; from += chunk) {
    const batch = [];
    for (let i = from; i < Math.min(jobs, from + chunk); i++) {
      batch.push(
        queue.upsertJobScheduler(
          `s${i}`,
          { every: 1000, startDate: first + Math.floor((i * 1000) / jobs) },
          { name: 'noop', data: {}, opts: { removeOnComplete: true, removeOnFail: true } },
        ),
      );
    }
    await Promise.all(batch);
  }
  const late = Date.now() - first;
  if (late > 0) console.error(`warning: loading ended ${late} ms after the first due time`);
  await queue.close();
}

async function check(jobs) {
  const queue = new Queue(QUEUE, { connection: connection() });
  const client = connection();
  const pipeline = client.pipeline();
  for (let i = 0; i < jobs; i++) pipeline.hget(`bull:${QUEUE}:repeat:s${i}`, 'ic');
  const produced = (await pipeline.exec()).reduce((sum, [, ic]) => sum + Number(ic || 0), 0);
  const counts = await queue.getJobCounts('delayed', 'wait', 'prioritized', 'active', 'completed', 'failed');
  const left = Object.values(counts).reduce((a, b) => a + b, 0);
  console.log(`${produced} ${left} ${JSON.stringify(counts)}`);
  await queue.close();
  await client.quit();
}

const main = {
  worker: () => worker(Number(rest[0]), Number(rest[1]), rest[2]),
  load: () => load(Number(rest[0]), Number(rest[1])),
  check: () => check(Number(rest[0])),
}[mode];
if (!main) {
  console.error('usage: bench.js worker PORT CONCURRENCY STOP_AT_MS RECORDS | load PORT JOBS FIRST_MS | check PORT JOBS');
  process.exit(2);
}
main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
