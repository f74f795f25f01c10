// npm run mutation: Stryker over the service's modules with behaviour that a test file runs in its
// own process (docs/testing.md lists those left out), against a real PostgreSQL like the tests,
// one run per area: an area's modules are mutated against the test files written for them.
// With every suite behind every mutant, a mutant that survives (or that only a late suite kills)
// ran the whole list: config and the plugins are loaded by every test, so the run took hours.
// stryker.config.json holds what the runs share. Reports: reports/mutation/<area>.{json,html},
// and a summary of all areas at the end. `npm run mutation -- auth routes` runs only those areas;
// `--incremental` reruns only the mutants whose code or covering test files changed since the last
// incremental run of their area (Stryker's incremental mode; the first one runs them all).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { projectRoot } from '../src/project-root.js'
import { type Command, isEntryPoint, readCommandLine, usageError } from '../src/command-line.js'
import { runBin, withTestDatabase } from './test-database.js'

interface Area { name: string, mutate: string[], testFiles: string[], concurrency?: number }

// Each area's test files in the order that kills its mutants soonest: Stryker runs a mutant's
// covering files in this order and stops at the first that fails. Chosen by replaying a full run's
// coverage and kills with each file's time (stryker.notes.md); mostly fastest first.
const areas: Area[] = [
  {
    name: 'problems',
    mutate: ['src/problems.ts', 'src/error-handler.ts', 'src/validation.ts', 'src/json-body.ts', 'src/routes/problems.ts', 'src/security-headers.ts'],
    // The routes' files before problems.test: most of the body parser's mutants are killed by
    // unauthorize.test, and many of the validators' by list.test.
    // unknown-parameters and problem-pages: the hints for unknown query parameters and the pages of
    // the catalogue, whose mutants no other file kills (68 survived without them on 2026-11-26);
    // request-timeout: the Connection: close on an answer sent before its request's body.
    testFiles: ['test/src/validation.test.ts', 'test/src/problem-catalogue.test.ts', 'test/src/problem-details.test.ts', 'test/routes/unauthorize.test.ts',
      'test/routes/list.test.ts', 'test/http/problems.test.ts', 'test/routes/grant.test.ts', 'test/http/unknown-parameters.test.ts',
      'test/routes/problem-pages.test.ts', 'test/http/request-timeout.test.ts', 'test/src/security-headers.test.ts',
      // edges: transfer codings, two Content-Type lines, a parser error pipelined behind an answer;
      // preconditions: the 412s' own details (2026-11-28: 29 survived or uncovered without them).
      'test/http/edges.test.ts', 'test/routes/preconditions.test.ts',
      // observability: a body malformed on the wire is logged as the 400 it was told, not a 408.
      'test/http/observability.test.ts']
  },
  {
    name: 'routes',
    mutate: ['src/routes/permissions/**/*.ts', 'src/entity-tags.ts', 'db/queries/**/*.ts', '!src/routes/permissions/changes.ts',
      '!db/queries/history.ts'],
    // Not test/http/model.test.ts: in the run of 2026-11-24 it ran for 32 mutants the suites before it
    // left alive and killed none of them, at 13 s a run.
    // The last three for the change feed's statement, the demo seeding's lock, and the replica
    // routing of a read (the newest version an If-None-Match names; a write's position): their
    // mutants survived every file before them (2026-11-26, 35 of 370).
    testFiles: ['test/routes/grant.test.ts', 'test/routes/preconditions.test.ts', 'test/routes/list.test.ts', 'test/routes/list-kept-pages.test.ts',
      'test/routes/changes.test.ts', 'test/routes/unauthorize.test.ts', 'test/routes/permissions/actor.test.ts', 'test/db/atomicity.test.ts', 'test/db/schema.test.ts',
      'test/routes/feed.test.ts', 'test/db/seed-history.test.ts', 'test/system/replicas.test.ts']
  },
  // Two parts of the routes whose mutants only one file kills, run with that file first: each of
  // their mutants used to run three or four files before it (2026-11-25: 43 killed by list.test,
  // 58 by changes.test). The files after it are the routes' that cover them.
  {
    name: 'links',
    mutate: ['src/routes/links.ts'],
    testFiles: ['test/routes/list.test.ts', 'test/routes/grant.test.ts', 'test/routes/unauthorize.test.ts', 'test/routes/preconditions.test.ts',
      'test/routes/changes.test.ts']
  },
  {
    name: 'history',
    mutate: ['src/routes/permissions/changes.ts', 'db/queries/history.ts'],
    // feed-ids: a prune that waits for a transaction still open; replicas last: a history read with
    // its position (a replica's Consistency-Token).
    testFiles: ['test/routes/changes.test.ts', 'test/routes/grant.test.ts', 'test/routes/unauthorize.test.ts', 'test/routes/preconditions.test.ts',
      'test/routes/list.test.ts', 'test/db/feed-ids.test.ts', 'test/system/replicas.test.ts']
  },
  {
    name: 'page-cache',
    mutate: ['src/page-cache.ts', 'plugins/list-pages.ts'],
    testFiles: ['test/src/page-cache.test.ts', 'test/routes/list-kept-pages.test.ts', 'test/plugins/registration.test.ts']
  },
  {
    name: 'auth',
    mutate: ['plugins/auth/**/*.ts'],
    testFiles: ['test/plugins/auth.test.ts', 'test/plugins/jwks.test.ts', 'test/plugins/registration.test.ts', 'test/src/config.test.ts']
  },
  {
    name: 'config',
    mutate: ['src/config.ts', 'plugins/env.ts'],
    testFiles: ['test/src/config.test.ts', 'test/plugins/auth.test.ts']
  },
  {
    name: 'runtime',
    mutate: ['src/routes/health.ts', 'src/request-id.ts', 'plugins/db.ts', 'plugins/pressure.ts', 'plugins/lifecycle.ts', 'plugins/docs.ts',
      'plugins/metrics.ts', 'db/errors.ts', 'db/pool.ts', 'db/after-io.ts'],
    // test/system/pgbouncer.test.ts covers the start behind a transaction pooler (plugins/db.ts), and
    // pgbouncer-outage.test.ts its refusals (db/errors.ts, db/pool.ts); they are skipped where
    // pgbouncer is not installed, and those mutants then count as not covered.
    // registration.test first: about two seconds, and it kills what breaks a plugin's registration.
    testFiles: ['test/db/after-io.test.ts', 'test/plugins/registration.test.ts', 'test/db/pool.test.ts', 'test/plugins/metrics.test.ts', 'test/http/observability.test.ts', 'test/plugins/docs.test.ts',
      'test/system/pgbouncer.test.ts', 'test/system/pgbouncer-outage.test.ts', 'test/plugins/pressure.test.ts', 'test/system/shutdown.test.ts', 'test/db/overload.test.ts', 'test/system/outage.test.ts',
      // readiness while starting; the reads routed to replicas, their fallbacks and metrics (58 of
      // plugins/db.ts's mutants and 48 of plugins/metrics.ts's had no test before them, 2026-11-26);
      // the change feed's stream gauges.
      'test/routes/health.test.ts', 'test/system/replicas.test.ts', 'test/routes/feed-stream.test.ts',
      // the list's page cache: its counters and bytes.
      'test/routes/list-kept-pages.test.ts',
      // plugins/db.ts: positions (Consistency-Token) asked with replicas only, and the down line's fields.
      'test/db/replica-unreachable.test.ts'],
    // These files mostly wait (timeouts, a stopped database, a stalled loop): at the shared 4 the
    // two cores were idle a fifth of the time.
    concurrency: 6
  },
  {
    // Reads on streaming replicas: which replica may answer, their lag and positions, the
    // Consistency-Token. The replica set on its own first, then the service with a replica that
    // refuses connections, without replicas (no token sent), and with a real one; the model last.
    name: 'replicas',
    mutate: ['db/replicas.ts', 'db/lsn.ts', 'src/routes/consistency.ts'],
    testFiles: ['test/db/replicas.test.ts', 'test/db/replica-unreachable.test.ts', 'test/routes/preconditions.test.ts',
      'test/system/replicas.test.ts', 'test/http/model.test.ts']
  },
  {
    // The change feed: the hub that fans a change out, the events it sends, the plugin, the LISTEN
    // connection, and the route's stream and poll. Not test/system/feed-order.test.ts: its service
    // is a process of its own, which the mutant a run switches on does not reach.
    name: 'feed',
    mutate: ['src/feed-hub.ts', 'src/feed-events.ts', 'plugins/feed.ts', 'db/change-listener.ts', 'src/routes/feed/**/*.ts'],
    // The hub and the LISTEN connection on their own first: about a second each, against a real database.
    testFiles: ['test/src/feed-hub.test.ts', 'test/db/change-listener.test.ts', 'test/routes/feed-stream.test.ts', 'test/routes/feed-stream-pace.test.ts', 'test/routes/feed.test.ts',
      // a poll with a Consistency-Token is read where the token's state is (a replica behind it: the primary).
      'test/system/replicas.test.ts'],
    // The stream's tests mostly wait (heartbeats, a transaction held open, a paused consumer).
    concurrency: 6
  }
]

const command = {
  usage: 'npm run -s mutation -- [AREA...] [--incremental]',
  about: 'Stryker over the service\'s modules with behaviour, against a throwaway embedded PostgreSQL or TEST_DATABASE_URL,\n' +
    `one run per AREA: ${areas.map(({ name }) => name).join(', ')} (default: every one).\n` +
    'Reports: reports/mutation/AREA.{json,html}.',
  options: {
    incremental: { type: 'boolean', default: false, about: 'rerun only the mutants whose code or covering test files changed since the last incremental run' }
  },
  allowPositionals: true
} satisfies Command

/** Returns the exit code: 0 every area run (or --help), 1 Stryker failed or was interrupted, 2 bad arguments. */
async function main (args: string[]): Promise<number> {
  const commandLine = readCommandLine(command, args)
  if (typeof commandLine === 'number') return commandLine
  const { values: { incremental }, positionals: chosen } = commandLine
  const unknown = chosen.filter((name) => !areas.some((area) => area.name === name))
  if (unknown.length > 0) {
    return usageError(command, `unknown area ${unknown.join(', ')}; the areas: ${areas.map(({ name }) => name).join(', ')}`)
  }
  const toRun = chosen.length > 0 ? areas.filter(({ name }) => chosen.includes(name)) : areas

  // A mutant is killed or survives on its own merits, not on the seed the property tests drew.
  process.env.FUZZ_SEED ??= 'pinned'

  // How a mutant's test files run. A full run compiles them: Stryker builds its sandbox once per area
  // with tsc (into dist/, type checks off there, as a mutant need not type-check), so each of the
  // thousands of test processes it starts, one per test file per mutant, loads JavaScript instead of
  // TypeScript through tsx, which halves the CPU of a short file's process (an area 20 % faster). An
  // incremental run keeps the TypeScript: Stryker reuses a result only when the test file it names
  // is a file of the project, and compiled ones exist only in the sandbox.
  const howTestsRun = incremental
    ? { settings: { tap: { nodeArgs: ['--import', 'tsx'] } }, testFile: (file: string) => file }
    : {
        settings: { buildCommand: 'tsc -p tsconfig.json', disableTypeChecks: '{src,plugins,db,scripts,test}/**/*.ts' },
        testFile: (file: string) => join('dist', file.replace(/\.ts$/, '.js'))
      }

  const reportOf = (area: Area) => join('reports', 'mutation', `${area.name}.json`)
  let interrupted = false
  process.once('SIGINT', () => { interrupted = true })

  const started = Date.now()
  const failed = await withTestDatabase(async (env) => {
    // Stryker's runner imports tap as built; the tap command rebuilds it with the plugins package.json
    // names when they differ (after npm ci, tap's default set), so build it here the same way.
    if (await runBin('tap', ['build'], env) !== 0) return ['tap build']
    const shared = JSON.parse(await readFile(join(projectRoot, 'stryker.config.json'), 'utf8'))
    // Stryker runs each test file with node alone, where tap times a file out after its default
    // 30 s; `npm test` gives a file package.json's tap timeout. The same here, or a file that waits
    // longer (routes/feed-stream-pace, about 36 s) fails the area's first run.
    const { tap: { timeout: tapTimeout } } = JSON.parse(await readFile(join(projectRoot, 'package.json'), 'utf8')) as { tap: { timeout: number } }
    const strykerEnv = { ...env, TAP_TIMEOUT: String(tapTimeout) }
    const configDir = await mkdtemp(join(tmpdir(), 'client-permissions-stryker-'))
    const failedAreas: string[] = []
    try {
      for (const area of toRun) {
        if (interrupted) break
        const configFile = join(configDir, `${area.name}.json`)
        await writeFile(configFile, JSON.stringify({
          ...shared,
          ...(area.concurrency ? { concurrency: area.concurrency } : {}),
          ...howTestsRun.settings,
          mutate: area.mutate,
          tap: { ...howTestsRun.settings.tap, testFiles: area.testFiles.map(howTestsRun.testFile) },
          jsonReporter: { fileName: reportOf(area) },
          htmlReporter: { fileName: join('reports', 'mutation', `${area.name}.html`) },
          ...(incremental ? { incremental, incrementalFile: join('reports', 'mutation', `${area.name}.incremental.json`) } : {})
        }))
        console.log(`\n# mutation: ${area.name} (${area.mutate.join(', ')})`)
        if (await runBin('stryker', ['run', configFile], strykerEnv) !== 0) failedAreas.push(area.name)
      }
    } finally {
      await rm(configDir, { recursive: true, force: true })
    }
    return failedAreas
  })

  interface Counts { killed: number, survived: number, noCoverage: number, timeout: number, ignored: number, other: number }
  const counts = (): Counts => ({ killed: 0, survived: 0, noCoverage: 0, timeout: 0, ignored: 0, other: 0 })
  const byFile = new Map<string, Counts>()
  for (const area of toRun) {
    const report = JSON.parse(await readFile(reportOf(area), 'utf8').catch(() => '{"files":{}}')) as { files: Record<string, { mutants: Array<{ status: string }> }> }
    for (const [file, { mutants }] of Object.entries(report.files)) {
      const count = byFile.get(file) ?? counts()
      for (const { status } of mutants) {
        if (status === 'Killed') count.killed++
        else if (status === 'Survived') count.survived++
        else if (status === 'NoCoverage') count.noCoverage++
        else if (status === 'Timeout') count.timeout++
        else if (status === 'Ignored') count.ignored++
        else count.other++
      }
      byFile.set(file, count)
    }
  }
  // Stryker's score: detected (killed or timed out) of all valid mutants. Not counted: mutants a
  // `// Stryker disable` comment marks as equivalent (its reason beside them), and runtime errors.
  const score = ({ killed, timeout, survived, noCoverage }: Counts) => {
    const valid = killed + timeout + survived + noCoverage
    return valid === 0 ? 'n/a' : `${(100 * (killed + timeout) / valid).toFixed(1)} %`
  }
  const total = counts()
  console.log('\n| File | Score | Killed | Timeout | Survived | No coverage | Ignored (equivalent) | Runtime errors |\n|---|---|---|---|---|---|---|---|')
  for (const [file, count] of [...byFile].sort(([a], [b]) => a.localeCompare(b))) {
    for (const key of Object.keys(total) as Array<keyof Counts>) total[key] += count[key]
    console.log(`| ${file} | ${score(count)} | ${count.killed} | ${count.timeout} | ${count.survived} | ${count.noCoverage} | ${count.ignored} | ${count.other} |`)
  }
  console.log(`| **all** | **${score(total)}** | ${total.killed} | ${total.timeout} | ${total.survived} | ${total.noCoverage} | ${total.ignored} | ${total.other} |`)
  console.log(`\nWith the ${total.ignored} mutants marked equivalent counted as survivors: ${score({ ...total, survived: total.survived + total.ignored })}`)
  console.log(`\n${toRun.length} area(s) in ${Math.round((Date.now() - started) / 60_000)} min${failed.length > 0 ? `; Stryker failed in: ${failed.join(', ')}` : ''}`)
  return failed.length > 0 || interrupted ? 1 : 0
}

if (isEntryPoint(import.meta.url)) process.exit(await main(process.argv.slice(2)))
