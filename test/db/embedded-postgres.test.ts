// The leftover-postmaster rule of `npm start`, with real processes: a child of a live node process
// is in use; once that parent is killed with SIGKILL, the child is an orphan. Where a test run's
// throwaway clusters live: in RAM when there is room. And the throwaway cluster of a process killed
// with SIGKILL, ended by the next start.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { mkdir, readdir, rm, statfs, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { createServer } from 'node:net'
import pg from 'pg'
import t from 'tap'
import { endLeftovers, ownedFolder, postmasterPid, quit, running, temporaryFolder } from '../../db/cluster-folders.js'
import { freePort, isOrphaned, startThrowawayPostgres } from '../../db/embedded-postgres.js'
import { testDatabaseUrl } from '../support/database.js'
import { reportThenSigkill } from '../support/killed-fixture.js'

t.test('freePort: a loopback port below the ephemeral range (where outgoing connections take theirs), free to listen on', async (t) => {
  const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
  const ports = await Promise.all(Array.from({ length: 5 }, () => freePort()))
  for (const port of ports) {
    t.ok(port >= 10_000 && port < low, `${port}: from 10000 up to ${low}`)
    const server = createServer().listen(port, '127.0.0.1')
    await once(server, 'listening')
    await new Promise((resolve) => server.close(resolve))
  }
})

t.test('a process whose node parent lives is in use; killed with SIGKILL, its child is orphaned', async (t) => {
  // A node process that starts a long sleep and reports its pid.
  const parent = spawn(process.execPath, ['-e', `
    const child = require('node:child_process').spawn('sleep', ['30'], { stdio: 'ignore' })
    console.log(child.pid)
    setInterval(() => {}, 1000)`], { stdio: ['ignore', 'pipe', 'inherit'] })
  const [chunk] = await once(parent.stdout!, 'data') as [Buffer]
  const sleeper = Number(chunk.toString().trim())
  t.teardown(() => { try { process.kill(sleeper, 'SIGKILL') } catch {} })
  t.equal(await isOrphaned(sleeper), false, 'its node parent is alive')
  parent.kill('SIGKILL')
  await once(parent, 'exit')
  t.equal(await isOrphaned(sleeper), true, 'its parent was killed')
  t.equal(await isOrphaned(2 ** 22 + 12345), true, 'a pid that does not exist')
})

t.test('a test run\'s clusters are in RAM (/dev/shm) when it is a tmpfs with 2 GiB free, else in the temporary folder', async (t) => {
  const free = async () => {
    const shm = await statfs('/dev/shm').catch(() => undefined)
    return shm !== undefined && shm.type === 0x01021994 ? shm.bavail * shm.bsize : 0
  }
  const freeBefore = await free()
  const inRam = await temporaryFolder('client-permissions-where-', { inMemory: true })
  // Other test files use /dev/shm meanwhile: decided only far from the 2 GiB bound.
  const expected = freeBefore >= 3 * 1024 ** 3 ? '/dev/shm' : freeBefore < 1024 ** 3 ? tmpdir() : undefined
  const other = await temporaryFolder('client-permissions-where-')
  t.teardown(() => Promise.all([inRam, other].map((folder) => rm(folder, { recursive: true, force: true }))))
  if (expected !== undefined) t.equal(dirname(inRam), expected, `a folder for a cluster: ${inRam}`)
  else t.ok(['/dev/shm', tmpdir()].includes(dirname(inRam)), `a folder for a cluster: ${inRam}`)
  t.equal(dirname(other), tmpdir(), `any other folder: the temporary folder: ${other}`)
  const client = new pg.Client({ connectionString: testDatabaseUrl() })
  await client.connect()
  const { rows: [{ data_directory: dataDirectory }] } = await client.query('SHOW data_directory')
  await client.end()
  // A server given by TEST_DATABASE_URL lives where its owner put it.
  const folder = dirname(dataDirectory)
  if (!basename(folder).startsWith('client-permissions-pg-')) return
  // Made at the run's start: in RAM, unless /dev/shm had less room then than it has far from the bound now.
  if (expected !== undefined) t.equal(dirname(folder), expected, `the run's throwaway cluster: ${dataDirectory}`)
  else t.ok(['/dev/shm', tmpdir()].includes(dirname(folder)), `the run's throwaway cluster: ${dataDirectory}`)
})

t.test('a start ends the throwaway cluster of a process killed with SIGKILL, removes its folder, and leaves the clusters in use', async (t) => {
  const { report: { dataDir }, killed } = await reportThenSigkill<{ dataDir: string }>('test/db/throwaway-leftover.fixture.ts')
  const postmaster = postmasterPid(dataDir)!
  // Should the sweep fail, this test ends the leftover itself.
  t.teardown(async () => {
    // By its postmaster.pid, gone once swept: the PID may be another process's by then.
    quit(dataDir)
    await rm(dirname(dataDir), { recursive: true, force: true })
  })
  t.ok(killed, 'the owner was alive until SIGKILL ended it')
  t.ok(running(postmaster), 'its server outlived it')

  const next = await startThrowawayPostgres({ inMemory: true })
  t.teardown(next.stop)
  t.notOk(running(postmaster), `postmaster ${postmaster} stopped`)
  t.notOk(existsSync(dirname(dataDir)), `${dirname(dataDir)} removed`)
  // This run's cluster and the new one, whose owners live, were left alone.
  for (const url of [testDatabaseUrl(), next.url]) {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    t.same((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'a cluster in use still answers')
    await client.end()
  }
})

t.test('a folder without an owner file (its owner killed as it made it) is swept once a minute old; younger, owned by a live process, or with a server running in it, it is left', async (t) => {
  const prefix = `client-permissions-sweep-${process.pid}-`
  const unownedOld = await temporaryFolder(prefix, { inMemory: true })
  const unownedYoung = await temporaryFolder(prefix, { inMemory: true })
  const ownedOld = await ownedFolder(prefix, { inMemory: true })
  // Without an owner file but with a server running in it (a folder of a version before owner
  // files): its postmaster.pid names a live process, this one.
  const unownedServing = await temporaryFolder(prefix, { inMemory: true })
  await mkdir(join(unownedServing, 'pg'))
  await writeFile(join(unownedServing, 'pg', 'postmaster.pid'), `${process.pid}\n`)
  t.teardown(() => Promise.all([unownedOld, unownedYoung, ownedOld, unownedServing].map((folder) => rm(folder, { recursive: true, force: true }))))
  t.same((await readdir(ownedOld)).sort(), ['owner'], 'an owned folder holds its owner file, whole, and nothing half-written beside it')
  const twoMinutesAgo = new Date(Date.now() - 120_000)
  for (const folder of [unownedOld, ownedOld, unownedServing]) await utimes(folder, twoMinutesAgo, twoMinutesAgo)
  await endLeftovers(prefix, ['pg'])
  t.notOk(existsSync(unownedOld), 'no owner file, two minutes old: removed')
  t.ok(existsSync(unownedYoung), 'no owner file, just made: left (a start in progress)')
  t.ok(existsSync(ownedOld), 'owned by this live process: left')
  t.ok(existsSync(unownedServing), 'no owner file, two minutes old, a server running in it: left')
})
